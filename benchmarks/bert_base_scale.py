"""A BERT-base-sized encoder over many windows: the scale check of the GPU path.

The model is BERT-base's shape (12 layers, 12 heads, d_model 768, d_head 64, 3,072 feed-forward units,
Hugging Face ``BertConfig``'s defaults) with seeded random weights (``model.init=random``): the cost of a
forward pass and of the statistics depends on the shape, not on the weights, so no download is needed. The
tokenizer is the bundled MiniLM's, which has BERT-base-uncased's 30,522-token vocabulary. The corpus is the
BBC News documents written as JSON Lines, repeated as often as the window count needs (each copy is its own
document), cut into windows of ``--seq-len`` tokens.

Each experiment runs once in a fresh process (``benchmarks/run_child.py``, started as ``attnsim run`` starts)
logging to a temporary SQLite store, and the script prints one table row per experiment: windows, seconds in
``predict`` (the forward pass and the statistics), seconds in the whole run, windows per second, peak resident
memory, and peak GPU memory when CUDA was used. Target on one data-centre GPU (H200-class): 20,000 windows of
128 tokens in under 60 s of run time, statistics on the GPU.

Usage:
    python benchmarks/bert_base_scale.py --device cuda                  # 20,000 windows, csm
    python benchmarks/bert_base_scale.py --device cuda --experiments csm paper --batch-size 512
    python benchmarks/bert_base_scale.py --windows 64 --layers 2         # a quick look on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from _options import accelerator_override, device_name, load_average, positive, statistics_path  # benchmarks/, the script's folder

TARGET_S = 60.0  # seconds of run time for 20,000 windows of 128 tokens on one H200
TARGET_WINDOWS = 20000
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_child.py")


def write_model(folder: str, layers: int) -> None:
    """A BERT-base config (``layers`` layers; 12 is BERT-base) and the bundled tokenizer in ``folder``."""
    from transformers import AutoTokenizer, BertConfig

    from attnsim.capture.load import resolve_model_path

    BertConfig(num_hidden_layers=layers).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model_path("bundled")).save_pretrained(folder)


def write_corpus(path: str, windows: int, seq_len: int) -> int:
    """BBC documents as JSON Lines, repeated until they hold at least ``windows`` windows (counted at about
    0.75 words per token, doubled for margin); returns the number of documents written."""
    from attnsim.data.sources import bbc_documents

    texts = [doc["text"] if isinstance(doc, dict) else doc.text for doc in bbc_documents()]
    words = sum(len(text.split()) for text in texts)
    per_copy = max(1, int(words / 0.75 / seq_len))  # windows one copy of the corpus gives, roughly
    copies = max(1, -(-2 * windows // per_copy))
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(copies):
            for text in texts:
                out.write(json.dumps({"text": text}) + "\n")
    return copies * len(texts)


def run(experiment: str, overrides, folder: str) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", MLFLOW_TRACKING_URI=f"sqlite:///{folder}/mlflow.db")
    out = subprocess.run([sys.executable, CHILD, experiment, *overrides], capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"attnsim run {experiment} {' '.join(overrides)} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=positive, default=TARGET_WINDOWS, help=f"windows of every run (default {TARGET_WINDOWS:,})")
    parser.add_argument("--seq-len", type=positive, default=128, help="tokens per window (default 128)")
    parser.add_argument("--layers", type=positive, default=12, help="encoder layers (default 12, BERT-base)")
    parser.add_argument("--batch-size", type=positive, default=256, help="windows per batch (default 256)")
    parser.add_argument("--experiments", nargs="+", default=["csm"], help="attnsim experiments to run (default csm)")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda[:N] (sets trainer.accelerator)")
    args = parser.parse_args(argv)
    if args.seq_len > 512:
        parser.error(f"--seq-len {args.seq_len} is longer than BERT-base's 512 positions; give at most 512")
    from attnsim.config import load_config
    from attnsim.errors import AttnsimError

    with tempfile.TemporaryDirectory() as folder:
        model, corpus = os.path.join(folder, "bert-base-random"), os.path.join(folder, "bbc.jsonl")
        overrides = [
            f"model.path={model}",
            "model.init=random",
            "corpus.source=jsonl",
            f"corpus.path={corpus}",
            f"corpus.seq_len={args.seq_len}",
            f"corpus.limit={args.windows}",
            f"trainer.batch_size={args.batch_size}",
            "trainer.progress_bar=false",
            accelerator_override(args.device),
        ]
        for name in args.experiments:
            try:  # the experiments and overrides are checked before anything is written or run
                load_config(name, overrides)
            except AttnsimError as exc:
                parser.error(str(exc))
        write_model(model, args.layers)
        documents = write_corpus(corpus, args.windows, args.seq_len)
        load = load_average()
        print(
            f"BERT-base shape ({args.layers} layers x 12 heads, d_model 768), random weights; {args.windows:,} windows of {args.seq_len} tokens from "
            f"{documents:,} BBC documents (repeated); batch {args.batch_size}; {args.device}; statistics path {statistics_path()}; load average {load:.2f}",
            flush=True,
        )
        print()
        print("| experiment | device | windows | predict s | run s | windows/s in predict | peak RSS MiB | peak GPU MiB | target |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in args.experiments:
            result = run(name, overrides, folder)
            predict = result["timings"].get("predict", float("nan"))
            gpu = result.get("gpu_peak_mib")
            if result["windows"] >= TARGET_WINDOWS and args.seq_len == 128 and args.layers == 12 and args.device.startswith("cuda"):
                verdict = f"{'PASS' if result['run'] < TARGET_S else 'FAIL'} (< {TARGET_S:.0f} s on one H200)"
            else:
                verdict = f"none (the target is for {TARGET_WINDOWS:,} windows of 128 tokens, 12 layers, on a GPU)"
            print(
                f"| {name} | {args.device} | {result['windows']:,} | {predict:.1f} | {result['run']:.1f} | {result['windows'] / predict:.0f} | "
                f"{result['peak_mib']:.0f} | {'-' if gpu is None else f'{gpu:.0f}'} | {verdict} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
