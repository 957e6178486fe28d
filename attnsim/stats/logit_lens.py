"""The logit lens (nostalgebraist 2020): every layer's residual stream read by the model's own final norm and unembedding.

For each layer L and position i, ``logits_L = N(resid_post[L]_i) · W_Uᵀ + b_U``, with N the model's final norm
applied with its own scale of that stream (σ of ``resid_post[L]_i``, not of the final layer). Per layer over the
corpus: the next-token loss (mean cross-entropy of the actual next token, nats), the top-1 accuracy, and the share
of positions whose top-1 token is the final layer's top-1 (``agreement``; 1 at the last layer). The last layer's
loss is the model's own loss.

The vocabulary-sized logits are built ``chunk`` positions at a time and reduced at once: memory is
chunk × vocab floats, whatever the batch.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch
import torch.nn.functional as F

from attnsim.stats.base import Accumulator, safe_divide


def apply_norm(x: torch.Tensor, gain: torch.Tensor, bias: Optional[torch.Tensor], centred: bool, eps: float) -> torch.Tensor:
    """The final norm of rows x (N, d_model): ``g ⊙ (x − mean·centred) / sqrt(mean((x − mean·centred)²) + eps) + b`` (float32)."""
    x = x.float()
    if centred:
        x = x - x.mean(-1, keepdim=True)
    out = gain.float() * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return out + bias.float() if bias is not None else out


def lens_update(
    streams: Sequence[torch.Tensor],
    targets: torch.Tensor,
    gain: torch.Tensor,
    bias: Optional[torch.Tensor],
    centred: bool,
    eps: float,
    w_u: torch.Tensor,
    b_u: Optional[torch.Tensor] = None,
    chunk: int = 256,
) -> Dict[str, torch.Tensor]:
    """One batch's sums of the logit lens.

    Args:
        streams: per layer, (N, d_model) the residual stream (``resid_post``) at the N measured positions.
        targets: (N,) the actual next token of each position.
        gain, bias, centred, eps: the final norm (:func:`apply_norm`); w_u: (vocab, d_model); b_u: (vocab,) or None.
        chunk: positions per vocabulary-sized block.

    Returns:
        ``loss`` (Σ cross-entropy, nats), ``correct`` (top-1 = target), ``agree`` (top-1 = the last layer's top-1) and
        ``count``, each (layer, 1) float64.
    """
    n_layers, n = len(streams), int(targets.numel())
    sums = {name: torch.zeros(n_layers, 1, dtype=torch.float64, device=targets.device) for name in ("loss", "correct", "agree", "count")}
    w = w_u.float()
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        target = targets[rows]
        final_top = None
        for layer in reversed(range(n_layers)):  # the last layer first: the others' agreement reads its top-1
            logits = apply_norm(streams[layer][rows], gain, bias, centred, eps) @ w.T  # (chunk, vocab), freed each step
            if b_u is not None:
                logits = logits + b_u.float()
            top = logits.argmax(-1)
            final_top = top if final_top is None else final_top
            sums["loss"][layer] += F.cross_entropy(logits, target, reduction="sum").double()  # tensors: no device sync
            sums["correct"][layer] += (top == target).sum().double()
            sums["agree"][layer] += (top == final_top).sum().double()
            sums["count"][layer] += target.numel()
    return sums


class LensSums(Accumulator):
    """Per layer (layer, 1): logit-lens loss, top-1 accuracy and agreement with the last layer, from summed counts."""

    def __init__(self, n_layers: int, **kwargs):
        super().__init__(**kwargs)
        for name in ("loss", "correct", "agree", "count"):
            self.add_sum(name, n_layers, 1)

    def update(self, sums: Dict[str, torch.Tensor]) -> None:  # noqa: D102 - sums: lens_update's
        self.fold(sums)

    def compute(self) -> Dict[str, torch.Tensor]:  # noqa: D102
        return {
            "loss": safe_divide(self.loss, self.count),
            "accuracy": safe_divide(self.correct, self.count),
            "agreement": safe_divide(self.agree, self.count),
        }


__all__ = ["LensSums", "apply_norm", "lens_update"]
