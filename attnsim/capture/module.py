"""The LightningModule of every run: one forward pass per batch, captured once, viewed by every finding."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import pytorch_lightning as pl
import torch

from attnsim.capture.hooks import BatchCapture, forward_with_capture, head_results, output_projections
from attnsim.capture.load import ModelInfo
from attnsim.capture.streaming import Consumer, streaming
from attnsim.capture.vision import vision_inputs

ViewFactory = Callable[[BatchCapture, Dict[str, Any]], Any]
"""``(capture, batch) -> view``: builds what the finding callbacks receive from one batch's raw capture."""


class CaptureModule(pl.LightningModule):
    """Wraps a Hugging Face encoder; ``predict_step`` returns the batch's raw :class:`~attnsim.capture.hooks.BatchCapture`,
    or what ``view_factory`` builds from it (the workflow injects one that builds the statistics' per-batch view).

    Args:
        model: the loaded encoder (eval mode).
        info: its :class:`~attnsim.capture.load.ModelInfo`.
        needs_attention: capture attention probabilities as well as per-head outputs.
        vector: ``z`` (per-head outputs before W_O) or ``result`` (z · W_O[h]).
        view_factory: ``(capture, batch) -> view``, or None to return the raw capture.
        capture_path: ``dense`` (attention maps from the model when needed) or ``blockwise`` (queries and
            keys recorded under SDPA, :mod:`attnsim.capture.queries`; no attention map is ever returned); ``recomputed``
            records them likewise for the dense view that recomputes each chunk's maps (:mod:`attnsim.stats.pairs.fused`);
            ``streamed`` runs eager attention that hands each layer's maps to the batch's view as they are computed
            (:mod:`attnsim.capture.streaming`): ``view_factory`` then has ``open(batch, n_layers, n_heads)``, whose view
            takes them (``window_chunks``, ``fold``) and, after the forward pass, the captured vectors (``attach``).

    Raises:
        ValueError: ``capture_path`` is ``streamed`` and ``view_factory`` cannot open a view before the forward pass.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        info: ModelInfo,
        needs_attention: bool,
        vector: str,
        view_factory: Optional[ViewFactory] = None,
        capture_path: str = "dense",
    ):
        super().__init__()
        self.model = model
        self.info = info
        self.needs_attention = needs_attention
        self.vector = vector
        self.view_factory = view_factory
        self.forward_calls = 0
        self.capture_path = capture_path
        if capture_path == "streamed" and not getattr(view_factory, "streams_attention", False):
            raise ValueError("capture_path='streamed' needs a view factory that opens each batch's view before its forward pass (StreamedViews).")
        if vector == "result":
            self.register_buffer("w_o", output_projections(model, info.arch, info.n_heads), persistent=False)

    def forward(self, batch: Dict[str, Any], stream: Optional[Consumer] = None):
        """One captured forward pass of ``batch``; ``stream`` (the streamed path: the batch's view) receives each
        layer's attention maps, chunk by chunk (:class:`~attnsim.capture.streaming.Consumer`)."""

        self.forward_calls += 1
        if self.info.arch.vision:  # images: pixel_values (B, C, H, W); every token is real
            inputs = vision_inputs(batch["pixel_values"], self.info.config, self.info.arch)
        else:
            inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        # T of the batch (images: extra tokens + patches of the layout); every captured tensor is checked against it
        recorded = self.capture_path in ("blockwise", "recomputed")  # queries and keys under SDPA, no maps
        with streaming(stream):
            _, capture = forward_with_capture(
                self.model,
                self.info.arch,
                self.info.n_heads,
                inputs,
                self.needs_attention and not recorded and stream is None,
                seq_len=int(batch["input_ids"].shape[1]),
                queries=recorded and self.needs_attention,
            )
        return capture

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Any:
        view = None
        if self.capture_path == "streamed" and self.needs_attention:  # the view folds each layer's maps during the forward pass
            view = self.view_factory.open(batch, self.info.n_layers, self.info.n_heads)
        capture = self(batch, view)
        # per-layer tensors: the statistics read them window by window and never need them stacked
        vectors = capture.z_layers
        if self.vector == "result":
            vectors = tuple(head_results(z[None], self.w_o[layer : layer + 1])[0] for layer, z in enumerate(capture.z_layers))
        raw = BatchCapture(vectors, capture.attention_layers, self.vector, capture.query_keys)
        if view is not None:
            return view.attach(raw)
        return raw if self.view_factory is None else self.view_factory(raw, batch)

    def on_predict_start(self) -> None:
        """A predict run starts: a view factory that counts the run's windows (the streamed path's) starts again."""
        reset = getattr(self.view_factory, "reset", None)
        if callable(reset):
            reset()

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        release_view(outputs)


def release_view(outputs: Any) -> None:
    """Release a batch's view (its ``release()``, when it has one) once every callback has read it.

    Lightning calls a module's ``on_predict_batch_end`` after every callback's, so every finding has
    folded the batch in. The loop keeps its reference to ``outputs`` until the next ``predict_step``
    returns: releasing the view's tensors here keeps one batch's capture alive at a time, not two.
    """
    release = getattr(outputs, "release", None)
    if callable(release):
        release()
