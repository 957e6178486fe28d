"""Capture with gradients: a classifier's attention probabilities and their gradients for one class.

Gradient-weighted maps (:mod:`attnsim.stats.gradmaps`) need ∂y_c/∂A, the
gradient of the target class logit y_c with respect to every layer's attention
probabilities, and ∂y_c/∂T for the tokens T entering the final transformer
block (CDAM). :class:`GradientModule` computes them in ``predict_step`` under
``torch.enable_grad()``; the Trainer must run predict with
``inference_mode=False`` (inference tensors cannot take part in autograd).
The plain :class:`~attnsim.capture.module.CaptureModule` path is untouched.

The model is any Hugging Face ``AutoModelForSequenceClassification`` (text)
or ``AutoModelForImageClassification`` (Vision Transformers), in eval mode.
A causal (decoder-only) language model is loaded as ``AutoModelForCausalLM``
and explained as a next-token classifier: y_c is the logit of token id c at
the *last real position* of each window (the prediction of the token that
would follow the window); ``maps.target_class`` selects the token id, and by
default each window's predicted (argmax) next token is explained.
When the checkpoint has no classification head, the head is initialised by
the model's own initialiser under ``torch.manual_seed(seed)`` and the run is
tagged ``attnsim.classifier_head=random_seeded``; a checkpoint's own head is
tagged ``checkpoint``.

Parameters are frozen (``requires_grad=False``): only gradients with respect
to activations are computed. A forward pre-hook on the first layer marks its
input as requiring a gradient, so every later activation is differentiable;
a pre-hook on the last layer keeps that layer's input tokens. Hooks are
registered in ``try`` and removed in ``finally``.
"""

from __future__ import annotations

import copy
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Tuple

import pytorch_lightning as pl
import torch
import torch.nn as nn

from attnsim.capture.architectures import Architecture, layer_modules
from attnsim.capture.hooks import BatchCapture, capture_heads, check_shapes, forward_without_cache, head_results, output_projections
from attnsim.capture.load import BUILD, ModelInfo
from attnsim.capture.module import ViewFactory, release_view
from attnsim.errors import ModelError
from attnsim.keys import Tag

log = logging.getLogger(__name__)

_HEAD_ARCHITECTURES = ("ForSequenceClassification", "ForImageClassification", "ForCausalLM")


@dataclass
class GradientCapture(BatchCapture):
    """A :class:`~attnsim.capture.hooks.BatchCapture` with a classifier's gradients for one class per item.

    Attributes (besides ``vectors``, ``attention`` (layer, batch, head, T, T) and ``vector``):
        attention_gradients: (layer, batch, head, query_pos, key_pos) ∂y_c/∂A (logit units).
        final_tokens: (batch, pos, d_model) tokens entering the final transformer block.
        final_gradients: (batch, pos, d_model) ∂y_c/∂final_tokens.
        logits: (batch, classes) classifier logits.
        target: (batch,) int64 class explained per item.
    """

    attention_gradients: Optional[torch.Tensor] = None
    final_tokens: Optional[torch.Tensor] = None
    final_gradients: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    target: Optional[torch.Tensor] = None


def select_target(logits: torch.Tensor, target_class: Optional[int] = None) -> torch.Tensor:
    """Class explained for each item: ``target_class`` when given, else the predicted (argmax) class.

    Args:
        logits: (batch, classes).

    Returns:
        (batch,) int64.

    Raises:
        ValueError: ``target_class`` is not a class of the model.
    """
    n_classes = logits.shape[-1]
    if target_class is None:
        return logits.argmax(-1)
    if not 0 <= target_class < n_classes:
        raise ValueError(f"target class {target_class} does not exist: the classifier has {n_classes} classes (0..{n_classes - 1})")
    return torch.full(logits.shape[:1], int(target_class), dtype=torch.long, device=logits.device)


def _hidden_states(args: tuple, kwargs: dict) -> torch.Tensor:
    """A layer's input hidden states (B, T, d_model), passed positionally or as ``hidden_states``."""
    if args:
        return args[0]
    for key in ("hidden_states", "x"):
        if key in kwargs:
            return kwargs[key]
    raise ModelError("Could not find the hidden states passed to a transformer layer; this architecture is not supported for gradient maps.")


@contextmanager
def layer_inputs(model: nn.Module, arch: Architecture) -> Iterator[Dict[str, torch.Tensor]]:
    """Within the block, make the first layer's input require a gradient and keep the last layer's input.

    Yields a dict that receives ``final`` (B, T, d_model), the tokens entering the final block.
    """
    layers = layer_modules(model, arch)
    found: Dict[str, torch.Tensor] = {}

    def first(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = _hidden_states(args, kwargs)
        if not hidden.requires_grad:
            hidden.requires_grad_(True)  # a leaf: parameters are frozen, so nothing before it needs a graph

    def last(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        found["final"] = _hidden_states(args, kwargs)

    handles = []
    try:
        handles.append(layers[0].register_forward_pre_hook(first, with_kwargs=True))
        handles.append(layers[-1].register_forward_pre_hook(last, with_kwargs=True))
        yield found
    finally:
        for handle in handles:
            handle.remove()


def classes(model: nn.Module, info: ModelInfo) -> int:
    """Number of classes a gradient map can explain: the classifier's labels, or a causal LM's vocabulary size."""
    if info.causal:
        return int(model.get_output_embeddings().weight.shape[0])
    return int(model.config.num_labels)


def target_logits(logits: torch.Tensor, attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """The logits a gradient map explains, (batch, classes).

    Args:
        logits: (batch, classes) of a classifier, or (batch, pos, vocab) of a causal language model.
        attention_mask: (batch, pos) 1 for real tokens; padding sits at the end of a window.
        causal: take a language model's next-token logits at each window's last real position.
    """
    if not causal:
        return logits
    last = (attention_mask.long().sum(-1) - 1).clamp_min(0)  # (B,)
    return logits[torch.arange(logits.shape[0], device=logits.device), last]  # (B, vocab)


def load_classifier(
    info: ModelInfo, init: str = "pretrained", seed: int = 0, num_labels: int = 2, dtype: torch.dtype = torch.float32
) -> Tuple[nn.Module, Dict[str, str]]:
    """A classification model (eval mode, eager attention, frozen parameters) and tags saying how it was loaded.

    Args:
        info: the model's :class:`~attnsim.capture.load.ModelInfo`.
        init: ``pretrained`` (checkpoint weights; a missing head is initialised under ``seed``) or
            ``random`` (every weight drawn under ``seed``: the null control).
        seed: seed of every randomly initialised weight.
        num_labels: classes of a newly initialised head (a checkpoint's own head keeps its classes).

    Returns:
        (model, tags) with ``attnsim.classifier_head`` = ``checkpoint`` or ``random_seeded``. A causal
        language model (``info.causal``) is loaded with its LM head (``AutoModelForCausalLM``): its classes are
        the vocabulary's token ids (``attnsim.num_labels`` = the vocabulary size) and ``num_labels`` is unused.

    Raises:
        ModelError: the weights cannot be loaded.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageClassification, AutoModelForSequenceClassification

    auto = AutoModelForImageClassification if info.arch.vision else AutoModelForCausalLM if info.causal else AutoModelForSequenceClassification
    has_head = any(name.endswith(_HEAD_ARCHITECTURES) for name in (getattr(info.config, "architectures", None) or []))
    tags: Dict[str, str] = {Tag.ATTN_IMPLEMENTATION.value: "eager", Tag.MODEL_INIT.value: init}
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            if init == "random" or info.path == BUILD:
                config = copy.deepcopy(info.config)
                if not has_head and not info.causal:
                    config.num_labels = num_labels
                model = auto.from_config(config, attn_implementation="eager", dtype=dtype)
                head = "random_seeded"
            else:
                extra = {} if has_head or info.causal else {"num_labels": num_labels}
                model, loading = auto.from_pretrained(
                    info.path, attn_implementation="eager", dtype=dtype, local_files_only=True, output_loading_info=True, **extra
                )
                head = "random_seeded" if loading.get("missing_keys") else "checkpoint"
    except (OSError, ValueError) as exc:
        raise ModelError(f"Could not load '{info.name}' as a classifier: {str(exc).splitlines()[0]}") from exc
    model.eval()
    model.requires_grad_(False)
    tags[Tag.CLASSIFIER_HEAD.value] = head
    tags[Tag.NUM_LABELS.value] = str(classes(model, info))
    if head == "random_seeded":
        log.warning("the classification head of %s is randomly initialised (seed %d): gradient maps explain an untrained head", info.name, seed)
    return model, tags


class GradientModule(pl.LightningModule):
    """Wraps a classifier; ``predict_step`` returns the batch's raw :class:`GradientCapture`, or what
    ``view_factory`` builds from it (as :class:`~attnsim.capture.module.CaptureModule` does).

    Args:
        model: a classifier from :func:`load_classifier`.
        info: its :class:`~attnsim.capture.load.ModelInfo`.
        vector: ``z`` or ``result`` (per-head vectors of the capture, as in the plain capture).
        view_factory: ``(capture, batch) -> view``, or None to return the raw capture.
        target_class: class explained for every item (a causal LM: a token id, the next token after the
            window's last real token); None: each item's predicted class (next token).
    """

    def __init__(self, model: nn.Module, info: ModelInfo, vector: str, view_factory: Optional[ViewFactory] = None, target_class: Optional[int] = None):
        super().__init__()
        self.model = model
        self.info = info
        self.vector = vector
        self.view_factory = view_factory
        self.target_class = target_class
        if vector == "result":
            self.register_buffer("w_o", output_projections(model, info.arch, info.n_heads), persistent=False)

    def _inputs(self, batch: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        if self.info.arch.vision:
            from attnsim.capture.vision import vision_inputs

            return vision_inputs(batch["pixel_values"], self.info.config, self.info.arch)
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Any:
        """One forward and one backward pass of the batch's summed target logits.

        Raises:
            ModelError: predict runs under inference mode, or the model returned no attention probabilities.
        """
        if torch.is_inference_mode_enabled():
            raise ModelError("Gradient maps need gradients: run predict with Trainer(inference_mode=False).")
        arch, n_heads = self.info.arch, self.info.n_heads
        with torch.enable_grad():
            with layer_inputs(self.model, arch) as found, capture_heads(self.model, arch, n_heads) as store:
                outputs = forward_without_cache(self.model, **self._inputs(batch), output_attentions=True)
            maps = getattr(outputs, "attentions", None)
            if not maps or any(m is None for m in maps):
                raise ModelError("The classifier returned no attention probabilities; it must run with eager attention.")
            check_shapes(store, maps, n_heads, int(batch["input_ids"].shape[0]), int(batch["input_ids"].shape[1]))
            logits = target_logits(outputs.logits, batch["attention_mask"], self.info.causal)  # (B, C): classes, or next-token ids
            target = select_target(logits.detach(), self.target_class)
            # items are independent: the gradient of the sum gives each item its own gradient
            chosen = logits.gather(1, target[:, None]).sum()
            grads = torch.autograd.grad(chosen, [*maps, found["final"]])
        attention = torch.stack([m.detach() for m in maps])  # (L, B, H, T, T)
        z = torch.stack([s.detach() for s in store])  # (L, B, H, T, d_head)
        vectors = head_results(z, self.w_o) if self.vector == "result" else z
        raw = GradientCapture(
            vectors,
            attention,
            self.vector,
            attention_gradients=torch.stack(grads[:-1]),
            final_tokens=found["final"].detach(),
            final_gradients=grads[-1],
            logits=logits.detach(),
            target=target,
        )
        return raw if self.view_factory is None else self.view_factory(raw, batch)

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        release_view(outputs)


__all__ = ["GradientCapture", "GradientModule", "classes", "load_classifier", "layer_inputs", "select_target", "target_logits"]
