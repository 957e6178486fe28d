"""Corpus-mean attention maps and positional attention scalars per layer and head.

For layer l, head h and one window with attention probabilities A (query_pos x
key_pos) and valid (real) tokens:

- ``matrix``: the corpus-mean attention map: at (i, j), the mean of A[i, j]
  over windows where both i and j are real tokens.
- ``confidence``: mean over valid query rows of ``max_j A[i, j]`` (the head
  "confidence" of Voita et al. 2019, "Analyzing Multi-Head Self-Attention",
  ACL, Sec. 4.1).
- ``self_mass``: mean ``A[i, i]``; ``previous_mass``: mean ``A[i, i-1]`` over
  rows whose previous token is real; ``next_mass``: mean ``A[i, i+1]`` over
  rows whose next token is real (positional heads, Voita et al. 2019 Sec. 4.2;
  Clark et al. 2019 Sec. 3).
- ``*_chance``: the same statistic for uniform attention over the row's n
  real keys (1 / n), averaged over the same rows. For a causal (decoder)
  model (``causal=True``) row i sees only the real keys at or before it
  (n = i + 1 in a window without padding before it), and the next token is
  never visible: ``next_mass_chance`` is 0, as ``next_mass`` itself.

Attention mass on [CLS]/[SEP]/punctuation, entropy and attention distance
belong to the ``separators`` finding and are not repeated here.
"""

from __future__ import annotations

from typing import Dict

import torch

from attnsim.stats.base import Accumulator, safe_divide

SCALARS = (
    "confidence",
    "confidence_chance",
    "self_mass",
    "self_mass_chance",
    "previous_mass",
    "previous_mass_chance",
    "next_mass",
    "next_mass_chance",
)


def local_mass(attention: torch.Tensor, valid: torch.Tensor, width: int = 4, causal: bool = False) -> Dict[str, torch.Tensor]:
    """Share of each head's attention within ``width`` tokens of the query, and its chance level.

    For query row i of a window, ``sum_j A[i, j]`` over the real keys j with ``|i - j| <= width`` (the query
    itself included), averaged over the real query rows of the batch. ``local_mass_chance`` is the same share
    for uniform attention over the keys each row sees: every real key, or for a causal (decoder) model the
    real keys at or before it.

    Args:
        attention: (..., batch, head, query_pos, key_pos) attention probabilities.
        valid: (batch, pos) bool real tokens.
        width: the largest distance |i - j| that counts as local (tokens, >= 0).
        causal: a decoder: row i sees the real keys 0..i (chance level).

    Returns:
        ``local_mass`` (..., head) and ``local_mass_chance`` (..., head), unitless float64 means over every
        real query row of the batch (NaN for a batch without real tokens).

    Raises:
        ValueError: ``width`` is negative.
    """
    if width < 0:
        raise ValueError(f"width must be >= 0 tokens, got {width}")
    weight = valid.double()  # (B, T)
    seq_len = weight.shape[-1]
    position = torch.arange(seq_len, device=weight.device)
    near = ((position[:, None] - position[None, :]).abs() <= width).double()  # (T, T) |i - j| <= width
    keys = weight[:, :, None] * weight[:, None, :]  # (B, T, T) real query, real key
    seen = keys * torch.tril(torch.ones_like(near)) if causal else keys  # (B, T, T) keys each query sees
    mass = (attention.double() * (near * keys)[:, None]).sum(-1)  # (..., B, H, T)
    total = (mass * weight[:, None, :]).sum((-3, -1))  # (..., H) summed over real query rows
    chance_rows = safe_divide((seen * near).sum(-1), seen.sum(-1)).nan_to_num(0.0)  # (B, T)
    rows = weight.sum()
    chance = (chance_rows * weight).sum().expand_as(total)
    return {"local_mass": safe_divide(total, rows.expand_as(total)), "local_mass_chance": safe_divide(chance, rows.expand_as(chance))}


class AttentionMapAccumulator(Accumulator):
    """Streaming corpus-mean attention maps and the scalars of the module docstring.

    Args:
        n_layers, n_heads: model shape.
        seq_len: window length T.
        causal: a decoder model: chance levels over the keys at or before each row (module docstring).

    States (float64 sums): matrix sum (L, H, T, T) and count (T, T); for each scalar a (L, H)
    sum of the statistic and a row count (previous/next have their own), and the uniform-attention sums.
    """

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, causal: bool = False):
        super().__init__()
        self.causal = bool(causal)
        self.add_sum("matrix_sum", n_layers, n_heads, seq_len, seq_len)
        self.add_sum("matrix_count", seq_len, seq_len)
        for name in ("confidence", "self", "previous", "next"):
            self.add_sum(f"{name}_sum", n_layers, n_heads)
            self.add_sum(f"{name}_rows")
            self.add_sum(f"{name}_uniform")

    def update(self, attention: torch.Tensor, valid: torch.Tensor) -> None:  # type: ignore[override]
        """Fold one batch in.

        Args:
            attention: (layer, batch, head, query_pos, key_pos) attention probabilities.
            valid: (batch, pos) bool real tokens.
        """
        attention = attention.double()
        weight = valid.double()  # (B, T)
        pairs = weight[:, :, None] * weight[:, None, :]  # (B, T, T)
        self.matrix_sum += torch.einsum("lbhij,bij->lhij", attention, pairs)
        self.matrix_count += pairs.sum(0)
        # keys each row can see: every real key, or (causal) the real keys at or before the row
        n_keys = weight.cumsum(-1) if self.causal else weight.sum(-1, keepdim=True)  # (B, T) or (B, 1)
        uniform = safe_divide(torch.ones_like(n_keys), n_keys).nan_to_num(0.0)  # 1/n per row
        rows = {
            "confidence": weight,
            "self": weight,
            "previous": weight.clone(),
            "next": weight.clone(),
        }
        rows["previous"][:, 1:] *= weight[:, :-1]
        rows["previous"][:, 0] = 0
        rows["next"][:, :-1] *= weight[:, 1:]
        rows["next"][:, -1] = 0
        values = {
            "confidence": (attention * pairs[None, :, None]).amax(-1),  # (L, B, H, T)
            "self": attention.diagonal(dim1=-2, dim2=-1),
            "previous": torch.nn.functional.pad(attention.diagonal(offset=-1, dim1=-2, dim2=-1), (1, 0)),
            "next": torch.nn.functional.pad(attention.diagonal(offset=1, dim1=-2, dim2=-1), (0, 1)),
        }
        for name, value in values.items():
            mask = rows[name]  # (B, T)
            getattr(self, f"{name}_sum").add_((value * mask[None, :, None, :]).sum((1, 3)))
            getattr(self, f"{name}_rows").add_(mask.sum())
            chance = uniform * 0.0 if (self.causal and name == "next") else uniform  # a decoder never sees the next token
            getattr(self, f"{name}_uniform").add_((mask * chance).sum())

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars (layer, head) named as in :data:`SCALARS` and ``matrix`` (layer, head, T, T)."""
        out: Dict[str, torch.Tensor] = {}
        for stat, name in (("confidence", "confidence"), ("self_mass", "self"), ("previous_mass", "previous"), ("next_mass", "next")):
            total = getattr(self, f"{name}_sum")
            rows = getattr(self, f"{name}_rows")
            out[stat] = safe_divide(total, rows.expand_as(total))
            out[f"{stat}_chance"] = safe_divide(getattr(self, f"{name}_uniform"), rows).expand_as(total).clone()
        out["matrix"] = safe_divide(self.matrix_sum, self.matrix_count.expand_as(self.matrix_sum))
        return out


__all__ = ["SCALARS", "AttentionMapAccumulator", "local_mass"]
