"""What ``attnsim.trace`` costs beside the plain forward pass of the same loaded model.

One text of ``--tokens`` tokens (BBC News), the model loaded once with eager attention (``pattern`` needs it);
rounds alternate the plain forward (``model(input_ids, attention_mask)`` under ``torch.no_grad``, as trace calls it), ``trace`` with every name and
``trace`` with ``names=["pattern"]``, and the median of each is printed with its ratio to the plain forward.
Targets: every name at most 1.5 x the plain forward (the record's ``result`` is an einsum of H x d_head x d_model
per position and layer, and every tensor is kept), ``pattern`` alone at most 1.2 x (the probabilities are the
model's own; only hooks and references are added). Timings on a shared machine vary: read the ratios of
several runs.

Usage:
    python benchmarks/trace_overhead.py --model smollm2 --tokens 128 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _options import positive  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="any model.path of a text model (default smollm2)")
    parser.add_argument("--tokens", type=positive, default=128)
    parser.add_argument("--rounds", type=positive, default=5)
    parser.add_argument("--threads", type=positive, default=2)
    args = parser.parse_args(argv)

    import torch

    import attnsim
    from attnsim.capture.hooks import no_cache
    from attnsim.capture.trace import _loaded

    torch.set_num_threads(args.threads)
    info, model, tokenizer = _loaded(args.model, True)
    from plain_forward import bbc_texts

    ids = tokenizer(" ".join(bbc_texts(3)), return_tensors="pt")["input_ids"][:, : args.tokens]
    mask = torch.ones_like(ids)
    calls = {
        "plain forward": lambda: model(input_ids=ids, attention_mask=mask, **no_cache(model)),
        "trace, every name": lambda: attnsim.trace(ids, model=model, tokenizer=tokenizer),
        'trace, names=["pattern"]': lambda: attnsim.trace(ids, model=model, tokenizer=tokenizer, names=["pattern"]),
    }
    times = {name: [] for name in calls}
    with torch.no_grad():
        for call in calls.values():  # warm-up
            call()
        names = list(calls)
        for round_ in range(args.rounds):  # each round starts with the next call: no call always runs first
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                call = calls[name]
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["plain forward"])
    print(f"{info.name}, one text of {ids.shape[1]} tokens, {args.rounds} rounds, order rotated, {args.threads} threads, eager attention")
    print("| call | median s | ratio to the plain forward |")
    print("| --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.4f} | {statistics.median(values) / base:.2f} |")
    every = statistics.median(times["trace, every name"]) / base
    pattern = statistics.median(times['trace, names=["pattern"]']) / base
    print(f"target every name <= 1.5 x: {'met' if every <= 1.5 else 'missed'} ({every:.2f})")
    print(f"target pattern alone <= 1.2 x: {'met' if pattern <= 1.2 else 'missed'} ({pattern:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
