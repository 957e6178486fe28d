"""Signal and noise: which high-CSM pairs no simple rule explains, per layer and head.

A high-CSM pair (see :mod:`attnsim.stats.pairs`) is *explained* when at least
one of these holds: short distance (d = j - i <= ``short_range``), same
sentence, identical tokens, or high attention (the pair is in the window's
high-attention region, :mod:`attnsim.stats.attention_regions`). Per layer l
and head h, pooled over windows:

- ``explained_short``, ``explained_sentence``, ``explained_identical``,
  ``explained_attention``: share of high pairs meeting each rule (they overlap).
- ``unexplained_share``: share of high pairs meeting none of them (noise, or
  structure these rules do not name).
- ``unexplained_share_chance``: the same share under a uniform choice of the
  window's k high pairs among its n valid pairs: sum k * u / n over sum k,
  u the window's valid pairs meeting none of the rules for that head.
"""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView, head_sums

SCALARS = (
    "explained_short",
    "explained_sentence",
    "explained_identical",
    "explained_attention",
    "unexplained_share",
    "unexplained_share_chance",
)


def _noise_update(
    high_index: torch.Tensor,
    high_count: torch.Tensor,
    attention_index: torch.Tensor,
    both_index: torch.Tensor,
    both_count: torch.Tensor,
    pair_weights: torch.Tensor,
    distance: torch.Tensor,
    short_range: int,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`NoiseAccumulator` states.

    Args:
        high_index: (B, L, H, S) int64 pair indices of the high pairs, P in unused slots.
        high_count: (L, B, H) number of high pairs k.
        attention_index: (B, L, H, S') pair indices of the high-attention pairs, P in unused slots.
        both_index: (B, L, H, S) the high pairs that are also high-attention pairs, P elsewhere.
        both_count: (L, B, H) their number.
        pair_weights: (B, P, 5) 0/1 pair classes: valid, same, cross, identical, other.
        distance: (P,) int64 distance of each pair (-1: none, never short).
        short_range: largest distance counted as short (tokens).

    Returns:
        State name -> float64 increment.
    """
    valid, same, identical = pair_weights[..., 0], pair_weights[..., 1], pair_weights[..., 3]
    short = valid * ((distance >= 0) & (distance <= short_range)).float()  # (B, P); -1: pair without a distance
    static = torch.maximum(torch.maximum(short, same), identical)  # (B, P): explained without attention
    # not explained by the static rules: (1 - static) on valid pairs
    rest = valid - static  # (B, P) 0/1
    counts = head_sums(high_index, torch.stack([short, same, identical, rest], -1))  # (L, B, H, 4)
    # high pairs in the rest that are also high-attention; high-attention pairs in the rest
    high_rest_region = head_sums(both_index, rest[..., None])[..., 0]  # (L, B, H)
    region_rest = head_sums(attention_index, rest[..., None])[..., 0]  # (L, B, H)
    k = high_count.float()  # (L, B, H)
    n = valid.sum(-1)  # (B,)
    unexplained_pairs = rest.sum(-1)[None, :, None] - region_rest  # (L, B, H): u
    return {
        "high": k.sum(1).double(),
        "short": counts[..., 0].sum(1).double(),
        "sentence": counts[..., 1].sum(1).double(),
        "identical": counts[..., 2].sum(1).double(),
        "attention": both_count.sum(1).double(),
        "unexplained": (counts[..., 3] - high_rest_region).sum(1).double(),
        "unexplained_chance": (k * safe_divide(unexplained_pairs, n[None, :, None].expand_as(k)).nan_to_num(0.0)).sum(1).double(),
    }


def _noise_update_blocks(view: PairView, short_range: int) -> Dict[str, torch.Tensor]:
    """:func:`_noise_update` from a :class:`~attnsim.stats.pairs.blocks.BlockPairView` (same increments)."""
    table = view.by_distance  # (B, 5, T) float64: valid, same, cross, identical, neither

    def classes(index: torch.Tensor) -> Dict[str, torch.Tensor]:
        # (B, L, H, S) -> each class's count (B, L, H), one layer at a time (bounded memory at long T)
        out: Dict[str, list] = {"short": [], "same": [], "identical": [], "rest": []}
        for layer in range(index.shape[1]):
            f = view.pair_features(index[:, layer : layer + 1])
            short = f["valid"] & (f["distance"] <= short_range)
            rest = f["valid"] & ~short & ~f["same"] & ~f["identical"]
            for name, mask in (("short", short), ("same", f["same"]), ("identical", f["identical"]), ("rest", rest)):
                out[name].append(mask.sum(-1).double())
        return {name: torch.cat(values, 1) for name, values in out.items()}

    def total(counts: torch.Tensor) -> torch.Tensor:  # (B, L, H) -> (L, B, H)
        return counts.transpose(0, 1)

    high = classes(view.high_index)
    high_rest_region = total(classes(view.high_in_attention_index)["rest"])
    region_rest = total(classes(view.attention_index)["rest"])
    k = view.high_count.double()
    n = table[:, 0].sum(-1)
    far = (torch.arange(view.seq_len, device=table.device) > short_range).double()
    rest_pairs = (table[:, 4] * far).sum(-1)  # (B,) valid pairs neither short, same-sentence nor identical
    unexplained_pairs = rest_pairs[None, :, None] - region_rest
    return {
        "high": k.sum(1),
        "short": total(high["short"]).sum(1),
        "sentence": total(high["same"]).sum(1),
        "identical": total(high["identical"]).sum(1),
        "attention": view.high_in_attention.double().sum(1),
        "unexplained": (total(high["rest"]) - high_rest_region).sum(1),
        "unexplained_chance": (k * safe_divide(unexplained_pairs, n[None, :, None].expand_as(k)).nan_to_num(0.0)).sum(1),
    }


def _noise_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`NoiseAccumulator` states, each (layer, head) float64; NaN without high pairs."""
    high = state["high"]
    return {
        "explained_short": safe_divide(state["short"], high),
        "explained_sentence": safe_divide(state["sentence"], high),
        "explained_identical": safe_divide(state["identical"], high),
        "explained_attention": safe_divide(state["attention"], high),
        "unexplained_share": safe_divide(state["unexplained"], high),
        "unexplained_share_chance": safe_divide(state["unexplained_chance"], high),
    }


class NoiseAccumulator(Accumulator):
    """Streaming shares of high-CSM pairs explained by distance, sentence, identity and attention.

    Args:
        n_layers, n_heads: model shape.
        short_range: largest distance counted as short (tokens).

    States (float64 sums, (L, H)): high pairs, high pairs meeting each rule,
    high pairs meeting none, and the chance value of the latter.
    """

    def __init__(self, n_layers: int, n_heads: int, short_range: int = 4):
        super().__init__()
        self.short_range = short_range
        for name in ("high", "short", "sentence", "identical", "attention", "unexplained", "unexplained_chance"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        if view.blockwise:
            self.fold(_noise_update_blocks(view, self.short_range))
            return
        self.fold(
            _noise_update(
                view.high_index, view.high_count, view.attention_index, view.high_in_attention_index, view.high_in_attention, view.pair_weights, view.distance, self.short_range
            )
        )

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN without high pairs."""
        return _noise_compute(self.metric_state)
