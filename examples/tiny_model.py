"""Build a tiny seeded model of one architecture, offline, to try attnsim on a family it bundles no model of.

    python examples/tiny_model.py llama tiny-llama        # then: attnsim run paper model.path=tiny-llama
    python examples/tiny_model.py marian tiny-marian      # an encoder-decoder for `attnsim run alignment`

Families: gpt2, gpt_neox, llama, mistral, qwen2, gemma, gemma3_text, opt (decoders, with their LM head) and t5, bart,
marian (encoder-decoders). The model has 2 layers of 4 heads (d_model 32; Llama-like families use
grouped-query attention with 2 key/value heads) and random weights drawn under ``--seed``; its
tokenizer (a few hundred tokens) is trained here on the first BBC News documents of the bundled corpus,
so nothing is downloaded. It measures an untrained model: use it to learn the commands and to test
pipelines, not for findings. ``--positions`` sets the longest window it takes (default 512; the long-
context tutorial uses 2048). Run it from the repository's root: it uses the test suite's builder,
``tests/helpers/tiny_models.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests.helpers.tiny_models import DECODERS, SEQ2SEQ, save_tiny  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=DECODERS + SEQ2SEQ)
    parser.add_argument("out", help="folder to write the model and its tokenizer to (save_pretrained)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--positions", type=int, default=512, help="maximum positions (window length), default 512")
    args = parser.parse_args(argv)
    path = save_tiny(Path(args.out), args.family, seed=args.seed, positions=args.positions)
    print(f"{args.family}: 2 layers x 4 heads, seeded random weights (seed {args.seed}), saved to {path}")
    experiment = "alignment" if args.family in SEQ2SEQ else "paper"  # an encoder–decoder measures sentence pairs
    print(f"try it: attnsim run {experiment} model.path={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
