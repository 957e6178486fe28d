"""Residual-stream runs (``dla``, ``logit_lens``): each batch's capture record and the model's own readout.

A causal LM reads its final residual stream x through a final norm N and the unembedding W_U (bias b_U):
``logits = N(x) · W_Uᵀ + b_U``. With N's scale σ frozen at its clean value, N is affine:

- RMSNorm (Llama family): ``N(x) = g ⊙ x / σ``, ``σ = sqrt(mean(x²) + eps)``;
- LayerNorm (GPT-2, GPT-NeoX, OPT, Phi): ``N(x) = g ⊙ (x − mean(x)) / σ + b``, ``σ = sqrt(var(x) + eps)``.

:class:`Readout` holds g (read from the module itself: Gemma's ``1 + weight`` is found like Llama's ``weight``), b,
whether N centres, eps, W_U and b_U. :class:`ResidualModule` runs the base model (no (pos, vocab) logits are built)
and hands on a :class:`ResidualBatch`: the capture record of the names the findings ask for, the next tokens, which
positions have one, σ of every position and the readout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import pytorch_lightning as pl
import torch
import torch.nn as nn

from attnsim.capture.record import Trace
from attnsim.capture.trace import attention_bias, capture_record
from attnsim.errors import ModelError


@dataclass
class Readout:
    """A causal LM's final norm and unembedding, as tensors (float32, detached).

    Attributes:
        gain: (d_model,) g; bias: (d_model,) b, or None (RMSNorm); centred: whether N subtracts the mean (LayerNorm).
        eps: the norm's epsilon. norm: the final norm module itself (the logit lens applies it as the model does).
        w_u: (vocab, d_model) the unembedding; b_u: (vocab,) its bias, or None.
    """

    gain: torch.Tensor
    bias: Optional[torch.Tensor]
    centred: bool
    eps: float
    norm: nn.Module
    w_u: torch.Tensor
    b_u: Optional[torch.Tensor]

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """σ of every position: (batch, pos) from the final residual stream x (batch, pos, d_model), in float32."""
        x = x.float()
        spread = x.var(-1, unbiased=False) if self.centred else x.pow(2).mean(-1)
        return torch.sqrt(spread + self.eps)


def readout_of(model: nn.Module, arch: Any) -> Readout:
    """The :class:`Readout` of a loaded causal LM (``AutoModelForCausalLM``).

    g is measured on the module: N applied to a row of ones gives ``g / sqrt(1 + eps)`` for an RMSNorm (so a norm that
    scales by ``1 + weight`` is read right), and ``weight`` is read for a LayerNorm (whose output on ones is its bias).

    Raises:
        ModelError: the family declares no final norm (``Architecture.final_norm``) or the model has no LM head.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not getattr(arch, "final_norm", "") or head is None:
        raise ModelError(
            f"Model type '{model.config.model_type}' has no declared final norm and LM head, which the logit lens and direct logit attribution read. "
            "Use a causal language model of a supported family (GPT-2, GPT-NeoX, Llama family, OPT, Phi) loaded with its LM head."
        )
    norm = model.base_model.get_submodule(arch.final_norm)
    eps = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-5)))
    centred = isinstance(norm, nn.LayerNorm)
    d_model = head.weight.shape[1]
    with torch.no_grad():
        if centred:
            gain = norm.weight.detach().float() if norm.weight is not None else torch.ones(d_model)
            bias = norm.bias.detach().float() if norm.bias is not None else None
        else:
            ones = torch.ones(1, d_model, dtype=head.weight.dtype, device=head.weight.device)
            gain, bias = (norm(ones)[0].float() * (1.0 + eps) ** 0.5).detach(), None
    b_u = getattr(head, "bias", None)
    return Readout(gain, bias, centred, eps, norm, head.weight.detach().float(), b_u.detach().float() if b_u is not None else None)


@dataclass
class ResidualBatch:
    """One batch of a residual-stream run, as the findings read it.

    Attributes:
        record: the capture record of the names asked for (:class:`~attnsim.capture.record.Trace`), always with
            ``resid_post`` of every layer.
        targets: (batch, pos) the next token of each position (the last position's is a copy, never counted).
        valid: (batch, pos) bool, positions whose token and next token are both real.
        sigma: (batch, pos) the final norm's scale σ of the clean pass (float32).
        readout: the model's :class:`Readout`.
        attn_bias: (layer, d_model) W_O's bias of every layer (zeros where it has none).
    """

    record: Trace
    targets: torch.Tensor
    valid: torch.Tensor
    sigma: torch.Tensor
    readout: Readout
    attn_bias: torch.Tensor

    @property
    def batch_size(self) -> int:
        """Windows in the batch."""
        return int(self.targets.shape[0])

    def release(self) -> None:
        """Drop the record's tensors once every finding has read them."""
        self.record.tensors.clear()


def next_tokens(input_ids: torch.Tensor, mask: torch.Tensor) -> "tuple[torch.Tensor, torch.Tensor]":
    """``(targets, valid)``: each position's next token (batch, pos) and whether both tokens are real (bool)."""
    targets = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], 1)
    valid = torch.zeros_like(mask, dtype=torch.bool)
    valid[:, :-1] = mask[:, :-1].bool() & mask[:, 1:].bool()
    return targets, valid


class ResidualModule(pl.LightningModule):
    """The LightningModule of residual-stream runs: one capture of the base model per batch, no logits over the vocabulary.

    Args:
        model: a causal LM with its head (``AutoModelForCausalLM``), eval mode.
        info: its :class:`~attnsim.capture.load.ModelInfo`.
        names: the record's names the findings read (``resid_post`` is always added).
    """

    def __init__(self, model: nn.Module, info: Any, names: Sequence[str]):
        super().__init__()
        self.model = model
        self.info = info
        self.names = tuple(dict.fromkeys([*names, "resid_post"]))
        self.readout = readout_of(model, info.arch)  # refuses a model without final norm or LM head before predict
        self.register_buffer("attn_bias", attention_bias(model, info.arch, info.d_model), persistent=False)

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> ResidualBatch:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        tensors, _ = capture_record(self.model.base_model, self.info.arch, self.info.n_heads, {"input_ids": ids, "attention_mask": mask}, self.names)
        record = Trace(tensors, ids, [], mask, None, {"n_layers": self.info.n_layers, "n_heads": self.info.n_heads})
        targets, valid = next_tokens(ids, mask)
        if self.readout.w_u.device != ids.device:  # the module moved (a GPU): read the moved weights again
            self.readout = readout_of(self.model, self.info.arch)
        sigma = self.readout.scale(tensors["resid_post"][-1])
        return ResidualBatch(record, targets, valid, sigma, self.readout, self.attn_bias)

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        outputs.release()


__all__ = ["Readout", "ResidualBatch", "ResidualModule", "next_tokens", "readout_of"]
