"""Model loading and hooks that capture per-head outputs and attention probabilities.

The names below are imported on first use (PEP 562), so that importing a light submodule
(:mod:`attnsim.capture.gguf`, :mod:`attnsim.capture.locate`) loads neither torch nor transformers:
the command line's checks of ``model.path`` run before the heavy imports
(:mod:`attnsim.workflows.preflight`).
"""

from attnsim.lazy import lazy_attributes

_LAZY = {
    "ARCHITECTURES": "attnsim.capture.architectures",
    "Architecture": "attnsim.capture.architectures",
    "architecture_for": "attnsim.capture.architectures",
    "BatchCapture": "attnsim.capture.hooks",
    "HeadCapture": "attnsim.capture.hooks",
    "capture_heads": "attnsim.capture.hooks",
    "ModelInfo": "attnsim.capture.load",
    "inspect_model": "attnsim.capture.load",
    "load_model": "attnsim.capture.load",
    "load_tokenizer": "attnsim.capture.load",
    "resolve_model_path": "attnsim.capture.load",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = list(_LAZY)
