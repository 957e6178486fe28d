"""Command-line option types shared by the benchmark scripts (checked before anything is measured)."""

from __future__ import annotations

import argparse
import os
import re


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number; give 1 or more")
    return value


def device_name(text: str) -> str:
    """argparse type: ``cpu`` or ``cuda[:N]``; a CUDA device must be visible to torch."""
    if text != "cpu" and not re.fullmatch(r"cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu or cuda (cuda:N for the N-th GPU)")
    if text.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"{text}: torch {torch.__version__} sees no CUDA GPU on this machine; use --device cpu")
    return text


def accelerator_override(device: str) -> str:
    """The ``trainer.accelerator`` override that runs attnsim on ``device`` (``cpu`` or ``cuda[:N]``)."""
    return f"trainer.accelerator={'gpu' if device.startswith('cuda') else 'cpu'}"


def statistics_path() -> str:
    """``compiled`` or ``fallback``: the statistics path the measured ``attnsim`` processes take (numba
    importable and ``ATTNSIM_COMPILED`` not ``0``; attnsim.stats.pairs.kernels decides the same way, and
    warns when it falls back). Read without importing torch, so the parent process stays small."""
    import importlib.util

    if os.environ.get("ATTNSIM_COMPILED", "1").strip().lower() in ("0", "false", "no", "off"):
        return "fallback"
    if os.environ.get("NUMBA_DISABLE_JIT", "0").strip() not in ("", "0"):  # numba's own switch: any other value disables
        return "fallback"
    return "compiled" if importlib.util.find_spec("numba") is not None else "fallback"


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--model`` (``model.path``: ``bundled`` MiniLM, ``smollm2``, or a model folder) and ``--seq-len``
    (``corpus.seq_len``, tokens per window, default 128) to a benchmark's parser; :func:`model_overrides`
    turns the parsed values into config overrides."""
    parser.add_argument("--model", default="bundled", help="model.path: bundled (MiniLM), smollm2, or a model folder (default bundled)")
    parser.add_argument("--seq-len", type=positive, default=128, help="corpus.seq_len: tokens per window, special tokens included (default 128)")


def model_overrides(args: argparse.Namespace) -> list:
    """The config overrides of ``--model`` and ``--seq-len`` (see :func:`add_model_options`)."""
    return [f"model.path={args.model}", f"corpus.seq_len={args.seq_len}"]
