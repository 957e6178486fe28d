"""Fine-tuning checkpoints on disk: naming, metadata, discovery.

A checkpoint is a ``save_pretrained`` directory (model + tokenizer) named
``step-NNNNNN`` after the number of optimizer steps done, holding
``attnsim_checkpoint.json`` with at least ``global_step`` (written by
``attnsim finetune``). Directories written by other tools are accepted too:
their step is the trailing number of the directory name (``checkpoint-500``,
the Hugging Face ``Trainer`` naming).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from attnsim.errors import ModelError

CHECKPOINT_META = "attnsim_checkpoint.json"
_TRAILING_NUMBER = re.compile(r"(\d+)$")


class CheckpointError(ModelError):
    """Checkpoints cannot be found or read."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: optimizer steps done (``step``), its directory, and its metadata."""

    step: int
    path: str
    meta: Dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def checkpoint_name(step: int) -> str:
    """Directory name of the checkpoint after ``step`` optimizer steps: ``step-000050``."""
    return f"step-{step:06d}"


def read_checkpoint_meta(path: Path) -> Dict[str, Any]:
    """The ``attnsim_checkpoint.json`` of a checkpoint directory (``{}`` when absent or unreadable)."""
    try:
        data = json.loads((Path(path) / CHECKPOINT_META).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _as_checkpoint(path: Path) -> Checkpoint:
    meta = read_checkpoint_meta(path)
    if isinstance(meta.get("global_step"), int):
        return Checkpoint(int(meta["global_step"]), str(path.resolve()), meta)
    match = _TRAILING_NUMBER.search(path.name)
    if match is None:
        raise CheckpointError(
            f"Checkpoint directory '{path}' has no {CHECKPOINT_META} and no step number at the end of its name, so its training step is unknown. "
            'Rename it like step-000050 or checkpoint-50, or write {"global_step": 50} into its ' + CHECKPOINT_META + "."
        )
    return Checkpoint(int(match.group(1)), str(path.resolve()), meta)


def list_checkpoints(directory: Path) -> List[Checkpoint]:
    """The checkpoints in ``directory``, sorted by step.

    ``directory`` is either one checkpoint (it holds ``config.json``) or a
    folder of checkpoint sub-directories (each holding ``config.json``;
    unfinished ``*.tmp`` directories are ignored).

    Raises:
        CheckpointError: no checkpoint found, a step cannot be determined, or two checkpoints have the same step.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        what = "is a file, not a directory" if directory.is_file() else "does not exist"
        raise CheckpointError(f"Checkpoint directory '{directory}' {what}. Give the folder `attnsim finetune` saved its step-NNNNNN checkpoints in.")
    if (directory / "config.json").is_file():
        return [_as_checkpoint(directory)]
    found = [_as_checkpoint(p) for p in sorted(directory.iterdir()) if p.is_dir() and not p.name.endswith(".tmp") and (p / "config.json").is_file()]
    if not found:
        raise CheckpointError(
            f"No checkpoint in '{directory}': no sub-directory holds a config.json (save_pretrained format). "
            "Point --checkpoints at the directory `attnsim finetune` printed, or at a fine-tuning run id."
        )
    steps: Dict[int, str] = {}
    for ckpt in found:
        if ckpt.step in steps:
            raise CheckpointError(f"Checkpoints '{steps[ckpt.step]}' and '{ckpt.path}' both claim training step {ckpt.step}; keep one of them.")
        steps[ckpt.step] = ckpt.path
    return sorted(found, key=lambda c: c.step)
