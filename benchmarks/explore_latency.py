"""Latency of the live explorer (`attnsim explore`): from the end of typing to drawn maps, in headless Chromium.

For each model, a server runs in this process (uvicorn in a thread, 127.0.0.1) and Chromium types into its page
over the DevTools protocol (tests/helpers/browser.py): each edit inserts one character at the start of a text that the
model reads as exactly ``--tokens`` tokens, so every edit is a new forward pass. The page measures, per edit:

- typing -> drawn: from the input event to the maps drawn (includes the page's 40 ms debounce);
- server: the server's own time for the request (forward pass, statistics, encoding);
- fetch: request sent -> answer parsed; draw: answer -> drawn.

Then: choosing another head of the same text (no forward pass) and switching a head off (a second pass).
Targets (2-core CPU): MiniLM at 128 tokens under 300 ms typing -> drawn, so that the maps follow the text as it is
typed, with the server's share under 150 ms (half, the rest for the debounce, the fetch and the drawing); SmolLM2 at
128 tokens under 2 s, a 30-layer forward pass on the same CPU, still an answer to each edit rather than a batch job.

Usage: python benchmarks/explore_latency.py [--models bundled smollm2] [--tokens 128] [--edits 8] [--threads N]
(`make explore-latency`). Prints one table; the load average is printed beside it (other work on the machine slows it).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

R = "document.querySelector('.attnsim-explore')"


def text_of(explorer, tokens: int) -> str:
    """A BBC article's start that the model reads as at least ``tokens`` tokens (it is cut to ``tokens``)."""
    from attnsim.data.sources import bbc_documents

    for doc in bbc_documents():
        if explorer.window(doc.text).tokens > tokens + 20:
            return doc.text[:4000]
    raise SystemExit("no BBC document is long enough")


def drawn_after(page, seq: int, timeout: float = 120.0) -> int:
    return int(
        page.wait_for(
            f"(function(){{var r={R}; var s=+(r.getAttribute('data-seq')||0); return r.getAttribute('data-state')==='ready' && s>{seq} ? s : 0}})()", timeout
        )
    )


def measure(model: str, tokens: int, edits: int, threads: int | None) -> dict:
    import uvicorn

    from attnsim.explore.server import create_app
    from attnsim.explore.session import Explorer
    from tests.helpers.browser import Page

    explorer = Explorer.load([f"model.path={model}", f"corpus.seq_len={tokens}"], threads=threads)
    text = text_of(explorer, tokens)
    explorer.analyse(text, 0, 0)  # warm-up (the statistics' compiled kernels)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(explorer), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    from urllib.parse import quote

    out = {"model": explorer.info.name, "tokens": tokens}
    try:
        with tempfile.TemporaryDirectory() as profile, Page(f"http://127.0.0.1:{port}/#layer=1&head=1&text={quote(text)}", profile) as page:
            seq = drawn_after(page, 0)
            n = page.evaluate(f"{R}.__explore.data.n_tokens")
            assert n == tokens, f"the text was read as {n} tokens, not {tokens}"
            page.evaluate(f"{R}.__explore.timings.length = 0")
            for i in range(edits):
                page.evaluate(f"(function(){{var b={R}.querySelector('textarea'); b.focus(); b.setSelectionRange(0, 0)}})()")
                page.type_text("abcdefghij"[i % 10])
                seq = drawn_after(page, seq)
            typed = page.evaluate(f"{R}.__explore.timings")
            page.evaluate(f"{R}.__explore.timings.length = 0; {R}.querySelector('textarea').blur()")
            for key, code, number in [("ArrowDown", "ArrowDown", 40), ("ArrowRight", "ArrowRight", 39)] * 2:
                page.press(key, code, number)
                seq = drawn_after(page, seq)
            switched = page.evaluate(f"{R}.__explore.timings")
            page.evaluate(f"{R}.__explore.timings.length = 0")
            page.press("ArrowUp", "ArrowUp", 38)
            seq = drawn_after(page, seq)
            page.press("x", "KeyX", 88)
            seq = drawn_after(page, seq)
            ablated = page.evaluate(f"{R}.__explore.timings")[-1:]
    finally:
        server.should_exit = True
        thread.join(timeout=10)

    def med(rows, key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(values) if values else float("nan")

    def worst(rows, key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return max(values) if values else float("nan")

    out.update(
        {
            "typing_to_drawn": med(typed, "typing_to_drawn_ms"),
            "typing_to_drawn_max": worst(typed, "typing_to_drawn_ms"),
            "server": med(typed, "server_ms"),
            "server_max": worst(typed, "server_ms"),
            "fetch": med(typed, "fetch_ms"),
            "draw": med(typed, "draw_ms"),
            "switch_head": med(switched, "fetch_ms") + med(switched, "draw_ms"),
            "head_off": med(ablated, "fetch_ms") + med(ablated, "draw_ms"),
            "edits": len(typed),
        }
    )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bundled", "smollm2"])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--edits", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args(argv)
    targets = {"all-MiniLM-L6-v2": (300, 150), "SmolLM2-135M-Instruct": (2000, None)}
    rows = [measure(m, args.tokens, args.edits, args.threads) for m in args.models]
    print(f"\nattnsim explore latency, {args.tokens} tokens, median of {args.edits} edits (ms); {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':<24}{'typing->drawn':>14}{'(max)':>8}{'server':>8}{'(max)':>8}{'fetch':>8}{'draw':>7}{'other head':>12}{'head off':>10}  target")
    for r in rows:
        total, server = targets.get(r["model"], (None, None))
        target = f"< {total} ms" + (f", server < {server} ms" if server else "") if total else ""
        met = "" if total is None else (" met" if r["typing_to_drawn"] < total and (server is None or r["server"] < server) else " MISSED")
        print(
            f"{r['model']:<24}{r['typing_to_drawn']:>14.0f}{r['typing_to_drawn_max']:>8.0f}{r['server']:>8.0f}{r['server_max']:>8.0f}{r['fetch']:>8.0f}{r['draw']:>7.0f}{r['switch_head']:>12.0f}{r['head_off']:>10.0f}  {target}{met}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
