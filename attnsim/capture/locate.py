"""Where ``model.path`` points, checked without torch or transformers.

:func:`locate_model` refuses a path that can name no model before anything heavy is imported: the
command line calls it before torch, Lightning, transformers and MLflow load
(:mod:`attnsim.workflows.preflight`), and :func:`attnsim.capture.load.inspect_model` gives the same
messages (:func:`model_folder`, :func:`not_found`) when it is called directly. The module imports
only the standard library and :mod:`attnsim.capture.gguf` (as light); a Hugging Face id is looked up with ``huggingface_hub`` (no torch).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Optional

from attnsim.capture.gguf import NAMED_MODELS, gguf_source, is_gguf, package_file
from attnsim.errors import ModelError

BUILD = "build"
"""``model.path`` of a model built from the fields of ``model.build`` (random weights only)."""


def model_folder(path: str) -> Optional[Path]:
    """The resolved folder of ``path`` when it exists on disk; None when nothing is there.

    Raises:
        ModelError: ``path`` is a file (other than a ``.gguf`` file), or a folder without ``config.json``.
    """
    local = Path(path).expanduser()
    if not local.exists():
        return None
    if not local.is_dir():
        raise ModelError(f"Model path '{path}' is a file; give the directory that holds config.json and the weights (save_pretrained format).")
    if not (local / "config.json").is_file():
        raise ModelError(
            f"Directory '{path}' is not a Hugging Face model: it has no config.json. Give a directory written by save_pretrained, or a cached hub id."
        )
    return local.resolve()


def looks_like_path(path: str) -> bool:
    """Whether ``path`` can only be a path on disk, not a Hugging Face id: it starts with ``/``, ``.`` or ``~``,
    or it has a ``/`` and the folder above it exists here."""
    return "/" in path and (path.startswith(("/", ".", "~")) or Path(path).expanduser().parent.exists())


def not_found(path: str, detail: str = "") -> ModelError:
    """The error for a ``model.path`` that names no model here: a missing path, or a name that is neither a
    named model nor a model in the Hugging Face cache (with the closest named model, if one is close).
    ``detail``: what the loader said, added to the message of an id that is not cached."""
    if looks_like_path(path):
        return ModelError(
            f"Model path '{path}' does not exist. Give a model folder (save_pretrained format), a .gguf file, or a named model ({', '.join(NAMED_MODELS)})."
        )
    close = difflib.get_close_matches(path.lower(), list(NAMED_MODELS), n=1, cutoff=0.6)  # SmolLM2 -> smollm2
    if close or "/" not in path:
        hint = f"Did you mean model.path={close[0]}? " if close else ""
        return ModelError(
            f"Model '{path}' is not a named model, a model folder or a model in the Hugging Face cache. {hint}"
            f"Named models: {', '.join(NAMED_MODELS)}; or give a folder (save_pretrained format), a .gguf file, or the id of a model already downloaded."
        )
    said = f" ({detail})" if detail else ""
    return ModelError(
        f"Model '{path}' is neither a local model directory nor a model in the Hugging Face cache{said}. "
        "Give an existing directory (save_pretrained format) or download the model first."
    )


def in_hub_cache(model_id: str) -> bool:
    """Whether the Hugging Face cache (``HF_HUB_CACHE``/``HF_HOME``, as ``huggingface_hub`` reads them) holds the
    ``config.json`` of ``model_id``: attnsim reads hub models from the cache only (``local_files_only``)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model_id, "config.json")
    except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
        return False
    return isinstance(found, str)


def locate_model(path: str) -> None:
    """Check that ``model.path`` names a model that can be read here, without loading anything heavy.

    Accepted: ``build``; a named model (:data:`~attnsim.capture.gguf.NAMED_MODELS`) whose package is
    installed; an existing ``.gguf`` file; a folder with ``config.json``; the id of a model in the
    Hugging Face cache. What the files hold (a GGUF's tensors, the config's model type, the weight
    files) is checked when the model is inspected (:func:`attnsim.capture.load.inspect_model`): an
    unsupported architecture is named before missing weights.

    Raises:
        ModelError: a named model's package is missing, the path does not exist, is a folder without
            ``config.json``, or the name is neither a named model nor cached (the closest named model is suggested).
    """
    if path == BUILD:
        return
    if path in NAMED_MODELS:  # a chunked GGUF model (gemma3): its chunk packages checked here, joined on first load
        package_file(NAMED_MODELS[path])
        return
    if is_gguf(path):
        gguf_source(path)
        return
    if model_folder(path) is None and (looks_like_path(path) or not in_hub_cache(path)):
        raise not_found(path)
