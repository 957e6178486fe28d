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


def load_average() -> float:
    """The 1-minute load average (NaN where the platform has none), printed with every measurement."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


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


def model_name(text: str) -> str:
    """argparse type: ``bundled`` (MiniLM), ``smollm2``, or an existing model folder or ``.gguf`` file (the values of ``model.path``)."""
    if text in ("bundled", "smollm2"):
        return text
    path = os.path.expanduser(text)
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{text!r} is neither bundled, smollm2 nor an existing model folder or .gguf file")
    # what attnsim's loader reads (a save_pretrained folder's config.json, or a GGUF file), checked before torch loads
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a folder without config.json, not a model folder; give a save_pretrained folder, a .gguf file, bundled or smollm2"
        )
    if os.path.isfile(path) and not path.endswith(".gguf"):
        raise argparse.ArgumentTypeError(f"{text!r} is a file but not a .gguf model; give a save_pretrained folder, a .gguf file, bundled or smollm2")
    return text


def add_model_options(parser: argparse.ArgumentParser, model: str = "bundled", seq_len: int = 128) -> None:
    """Add ``--model`` (``model.path``: bundled, smollm2 or a path) and ``--seq-len`` (``corpus.seq_len``, tokens per
    window, specials included) to ``parser``; ``model_overrides(args)`` turns the parsed values into attnsim overrides."""
    parser.add_argument(
        "--model", type=model_name, default=model, help=f"model.path: bundled (MiniLM), smollm2, or a model folder / .gguf file (default {model})"
    )
    parser.add_argument("--seq-len", type=positive, default=seq_len, help=f"tokens per window, specials included (corpus.seq_len, default {seq_len})")


OPTION_KEYS = {"corpus.seq_len": "--seq-len", "model.path": "--model", "corpus.limit": "--windows", "trainer.batch_size": "--batch-size"}
"""The attnsim config keys the benchmarks' own options set (``add_model_options``, ``--windows``, ``--batch-size``)."""


def with_options(message: str) -> str:
    """An attnsim error message with the benchmark option that set each config key it names, e.g. ``corpus.seq_len``
    refused at a length the model does not take, which the user gave as ``--seq-len``."""
    named = [f"{option} sets {key}" for key, option in OPTION_KEYS.items() if key in message]
    return f"{message.rstrip()} In this benchmark, {'; '.join(named)}." if named else message


def model_overrides(args: argparse.Namespace) -> list:
    """The attnsim overrides of ``add_model_options``'s values: ``["model.path=...", "corpus.seq_len=..."]``."""
    return [f"model.path={args.model}", f"corpus.seq_len={args.seq_len}"]
