"""Model loading and hooks that capture per-head outputs and attention probabilities."""

from attnsim.capture.architectures import ARCHITECTURES, Architecture, architecture_for
from attnsim.capture.hooks import BatchCapture, HeadCapture, capture_heads
from attnsim.capture.load import ModelInfo, inspect_model, load_model, load_tokenizer, resolve_model_path

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "architecture_for",
    "BatchCapture",
    "HeadCapture",
    "capture_heads",
    "ModelInfo",
    "inspect_model",
    "load_model",
    "load_tokenizer",
    "resolve_model_path",
]
