"""The refusals that need no model, made before torch, Lightning, transformers and MLflow are imported.

A command line run spends most of its first minute on a loaded machine importing those libraries; a
mistyped model name, a missing folder or a tracking store that cannot be reached needs none of them
to be refused. :func:`preflight` runs right after the config is read (``attnsim run``, ``sweep``,
``finetune``, ``explore``) and checks, in order:

- ``model.path`` (:func:`attnsim.capture.locate.locate_model`): a named model's package, a ``.gguf``
  file, a model folder with ``config.json``, or an id in the Hugging Face cache;
- ``corpus.path`` (:func:`attnsim.data.locate.locate_corpus`): exists, is a file or folder of the kind
  the source reads, and is not empty;
- ``--checkpoints`` of a sweep (:func:`attnsim.workflows.sweep.checkpoint_folder`) and its ``--base``;
- the tracking store (:func:`attnsim.tracking.store.check_store`): its URI's form, a database's port and
  an MLflow server's answers, each within about 5 s.

Nothing is created: no store file, no folder, no run. What a file holds (a GGUF's tensors, a config's
fields, the text's encoding) is read later, by the code that reads it. ``tests/test_preflight.py``
runs each refusal with torch, Lightning, transformers and MLflow made unimportable.
"""

from __future__ import annotations

from typing import Any, Optional

HEAVY_MODULES = ("torch", "pytorch_lightning", "lightning", "transformers", "mlflow")
"""The libraries none of these checks may import (``tests/test_preflight.py`` makes them unimportable)."""


def preflight(cfg: Any, checkpoints: Optional[str] = None, base: Optional[str] = None, store: bool = True) -> None:
    """Refuse what can be refused without a model or a heavy library (module docstring), before any is imported.

    Args:
        cfg: a checked config (:func:`attnsim.config.load_config`).
        checkpoints: a sweep's ``--checkpoints`` (a folder, or a fine-tuning run id checked later in the store).
        base: a sweep's ``--base`` model path.
        store: check the tracking store too (False for the explorer, which reads a store only for ``--run``).

    Raises:
        ModelError: ``model.path`` or ``--base`` names no model that can be read here.
        CorpusError: ``corpus.path`` is missing, of the wrong kind, or empty.
        SweepError, CheckpointError: ``--checkpoints`` is neither a folder of checkpoints nor a run id.
        TrackingError: the tracking store cannot be used.
    """
    from attnsim.capture.locate import locate_model
    from attnsim.data.locate import locate_corpus

    locate_model(str(cfg.model.path))
    if base:
        locate_model(base)
    locate_corpus(str(cfg.corpus.source), cfg.corpus.path)
    if checkpoints is not None:
        from attnsim.workflows.sweep import checkpoint_folder

        checkpoint_folder(checkpoints)
    if store:
        from attnsim.tracking.store import check_store

        check_store(cfg.tracking.uri)
