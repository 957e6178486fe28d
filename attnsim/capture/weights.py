"""Checks that a model's weights are all there: the files of a model folder before anything loads, and the
parameters a load left newly initialised after it.

transformers starts any parameter its checkpoint lacks at random and only logs it, so a folder whose weights
file is gone, a sharded set missing a shard, a GGUF file missing a tensor (or the first shard of a split GGUF)
would otherwise be measured as an untrained model under the tag ``pretrained``. Only ``model.init=random``
builds random weights on purpose.

Legitimately absent keys are not counted: tied weights (``lm_head.weight`` tied to the input embeddings:
transformers ties them and does not report them missing), non-persistent buffers (not in a state dict),
``position_ids`` buffers (an ``arange``, computed), the weights a model class declares it computes
(``_keys_to_ignore_on_load_missing``: Marian's sinusoidal positions) and, for the bare model that the
capture runs, its pooler (a task model's pooling layer, absent from masked-LM checkpoints, whose output
no measurement reads).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from attnsim.errors import WeightsError

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH = "pytorch_model.bin"
PYTORCH_INDEX = "pytorch_model.bin.index.json"

ALWAYS_ABSENT = ("position_ids",)  # buffers that are an arange, computed where a checkpoint lacks them
UNUSED_BY_CAPTURE = ("pooler",)  # the bare model's pooling layer: run, its output never read by a measurement


def check_weights_present(folder: str) -> None:
    """Refuse a model folder without the weights files transformers would load, before anything loads.

    transformers reads ``model.safetensors``, else the shards that ``model.safetensors.index.json`` lists,
    else ``pytorch_model.bin`` (or the shards of its index). A folder with none of them (a checkpoint whose
    weights were never written or were deleted), or an index whose shards are not all there (one shard of
    ``model-00002-of-00003.safetensors`` not copied), is refused naming the files.

    Raises:
        WeightsError: naming the folder, the missing file(s) and the fix.
    """
    root = Path(folder)
    for single, index in ((SAFETENSORS, SAFETENSORS_INDEX), (PYTORCH, PYTORCH_INDEX)):
        if (root / single).is_file():
            return
        if (root / index).is_file():
            _check_shards(root / index)
            return
    raise WeightsError(
        f"Model folder '{folder}' has a config.json but no weights file ({SAFETENSORS}, {SAFETENSORS_INDEX} with its shards, or {PYTORCH}). "
        "Save the model into it with model.save_pretrained(FOLDER), or copy its weights file(s) beside config.json."
    )


def _check_shards(index: Path) -> None:
    """Refuse an index of sharded weights whose shards are not all beside it, or that cannot be read."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(str(name) for name in weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise WeightsError(f"The index of sharded weights '{index}' cannot be read ({type(exc).__name__}). Save or copy the model again.") from None
    missing = [name for name in shards if not (index.parent / name).is_file()]
    if missing:
        raise WeightsError(
            f"The sharded weights of '{index.parent}' are incomplete: {len(missing)} of the {len(shards)} shards that {index.name} lists "
            f"{'is' if len(missing) == 1 else 'are'} missing ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}). "
            "Copy every shard beside the index, or save the model again (model.save_pretrained(FOLDER))."
        )


def check_weight_files(folder: str) -> None:
    """Refuse a model folder whose weights are missing (:func:`check_weights_present`), empty or truncated, before any weights load.

    Reads each ``*.safetensors`` file's header (8 bytes of length, then JSON) and checks that every tensor's
    byte range lies inside the file: a half-copied or half-written file (a checkpoint saved while the
    disk filled, a killed ``save_pretrained``) is refused here with its name, not as a raw ``SafetensorError``.

    Raises:
        WeightsError: naming the file, what is wrong and the fix.
    """
    check_weights_present(folder)
    for path in sorted(Path(folder).glob("*.safetensors")):
        size = path.stat().st_size
        fix = "Save or copy the model again (its folder holds a half-written weights file)."
        if size < 8:
            raise WeightsError(f"Weights file '{path}' is {'empty' if size == 0 else 'truncated'} ({size} bytes). {fix}")
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > size - 8:
                raise WeightsError(
                    f"Weights file '{path}' is damaged or truncated: its first bytes give a header of {length + 8:,} bytes, the file has {size:,}. {fix}"
                )
            try:
                header = json.loads(handle.read(length))
            except (ValueError, UnicodeDecodeError):
                raise WeightsError(f"Weights file '{path}' has a damaged header (not the JSON of a safetensors file). {fix}") from None
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
        need = 8 + length + max(ends, default=0)
        if need > size:
            raise WeightsError(f"Weights file '{path}' is truncated: its tensors need {need:,} bytes, the file has {size:,}. {fix}")


def newly_initialised(model: object, missing: Iterable[str], allowed: Sequence[str] = ()) -> List[str]:
    """The keys of ``missing`` (transformers' ``missing_keys`` of a load) that left a parameter of ``model`` at random, sorted.

    Not counted: ``position_ids`` buffers, the patterns of the model class's ``_keys_to_ignore_on_load_missing``
    (weights it computes), and keys containing one of ``allowed`` (e.g. ``pooler`` for the bare model).
    """
    ignored = [p.removeprefix("model.") for p in getattr(type(model), "_keys_to_ignore_on_load_missing", None) or []]
    parts = (*ALWAYS_ABSENT, *allowed)
    return sorted(key for key in missing if not any(part in key for part in parts) and not any(re.search(p, key) for p in ignored))


def unloaded_message(source: str, keys: Sequence[str], total: int, shown: Optional[Sequence[str]] = None) -> str:
    """The refusal of a load that left ``keys`` at random: their count, the first few (``shown``: the names the source
    spells them in, e.g. a GGUF file's ``blk.5.attn_q.weight``) and the fixes."""
    names = list(shown if shown is not None else keys)
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return (
        f"'{source}' lacks {len(keys)} of the {total} weight tensors the model needs ({', '.join(names[:5])}{more}); transformers would start "
        "them at random and the run would measure an untrained model as pretrained. Give the complete model (save it again, or copy every "
        "weights file), or set model.init=random to measure an untrained model on purpose."
    )


__all__ = ["check_weight_files", "check_weights_present", "newly_initialised", "unloaded_message"]
