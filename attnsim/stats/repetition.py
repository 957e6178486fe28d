"""Repeated tokens in the CSM, per layer and head (arXiv:2512.21956, repetition heads).

The paper finds heads (BERT-base layer 11, head 8) whose high-CSM pairs join
identical tokens across the whole input. *Identical* pairs are valid pairs
(i < j) of two occurrences of one token id, neither a special token nor
padding; *other* pairs are the remaining valid pairs; *long* identical pairs
have d = j - i >= T/2 (T the window length, as for ``long_range_share``).
Per layer l and head h, summed over windows (k high pairs among n valid pairs
per window):

- ``identical_high_share``: share of identical pairs that are high pairs.
- ``identical_high_share_chance``: the same under a uniform choice of the
  window's k high pairs: sum k * n_identical / n over sum n_identical (about
  ``top_fraction`` under the top-fraction rule).
- ``long_identical_high_share`` and ``long_identical_high_share_chance``: the
  same for long identical pairs.
- ``repetition_score``: long_identical_high_share / its chance; a head that
  finds repeated tokens across the whole window scores far above 1.
- ``identical_csm_mean``, ``other_csm_mean``: mean CSM of identical and of
  other pairs (CSM units); ``identical_csm_ratio`` their ratio (meaningful
  when CSM values are positive, as for most heads' z vectors; NaN when the
  other pairs' mean is 0).
"""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView, head_sums

SCALARS = (
    "identical_high_share",
    "identical_high_share_chance",
    "long_identical_high_share",
    "long_identical_high_share_chance",
    "repetition_score",
    "identical_csm_mean",
    "other_csm_mean",
    "identical_csm_ratio",
)


def _repetition_update(
    high_index: torch.Tensor,
    high_count: torch.Tensor,
    pair_weights: torch.Tensor,
    distance: torch.Tensor,
    seq_len: int,
    class_value_sums: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`RepetitionAccumulator` states.

    Args:
        high_index: (B, L, H, S) int64 pair indices of the high pairs, P in unused slots.
        high_count: (L, B, H) number of high pairs k.
        pair_weights: (B, P, 5) 0/1 pair classes: valid, same, cross, identical, other.
        distance: (P,) int64 distance of each pair; long identical pairs have distance >= seq_len / 2.
        seq_len: T, the window length (also for a padded tail window).
        class_value_sums: (L, B, H, 5) CSM summed over the pairs of each class.

    Returns:
        State name -> float64 increment.
    """
    valid, identical, other = pair_weights[..., 0], pair_weights[..., 3], pair_weights[..., 4]
    long = identical * (distance >= seq_len / 2).float()  # (B, P)
    counts = head_sums(high_index, torch.stack([identical, long], -1))  # (L, B, H, 2)
    k = high_count.float()  # (L, B, H)
    rate = safe_divide(k, valid.sum(-1)[:, None].expand_as(k)).nan_to_num(0.0)  # (L, B, H): k / n
    return {
        "high_identical": counts[..., 0].sum(1).double(),
        "high_long": counts[..., 1].sum(1).double(),
        "chance_identical": (rate * identical.sum(-1)[:, None]).sum(1).double(),
        "chance_long": (rate * long.sum(-1)[:, None]).sum(1).double(),
        "csm_identical_sum": class_value_sums[..., 3].sum(1).double(),
        "csm_other_sum": class_value_sums[..., 4].sum(1).double(),
        "n_identical": identical.sum().double(),
        "n_long": long.sum().double(),
        "n_other": other.sum().double(),
    }


def _repetition_update_blocks(view: PairView) -> Dict[str, torch.Tensor]:
    """:func:`_repetition_update` from a :class:`~attnsim.stats.pairs.blocks.BlockPairView` (same increments)."""
    table = view.by_distance  # (B, 5, T) float64: valid, same, cross, identical, neither
    far = (torch.arange(view.seq_len, device=table.device) >= view.seq_len / 2).double()  # (T,)
    parts = []
    for layer in range(view.n_layers):  # one layer at a time (bounded memory at long T)
        f = view.pair_features(view.high_index[:, layer : layer + 1])  # (B, 1, H, S)
        identical = f["identical"].double()
        long = identical * (f["distance"] >= view.seq_len / 2).double()
        parts.append(torch.stack([identical.sum(-1), long.sum(-1)], -1))
    counts = torch.cat(parts, 1).transpose(0, 1)  # (L, B, H, 2)
    k = view.high_count.double()
    n = table[:, 0].sum(-1)
    n_identical = table[:, 3].sum(-1)  # (B,)
    n_long = (table[:, 3] * far).sum(-1)
    rate = safe_divide(k, n[:, None].expand_as(k)).nan_to_num(0.0)
    class_sums = view.class_value_sums.double()
    return {
        "high_identical": counts[..., 0].sum(1),
        "high_long": counts[..., 1].sum(1),
        "chance_identical": (rate * n_identical[:, None]).sum(1),
        "chance_long": (rate * n_long[:, None]).sum(1),
        "csm_identical_sum": class_sums[..., 3].sum(1),
        "csm_other_sum": class_sums[..., 4].sum(1),
        "n_identical": n_identical.sum(),
        "n_long": n_long.sum(),
        "n_other": (n - n_identical).sum(),
    }


def _repetition_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`RepetitionAccumulator` states, each (layer, head) float64; NaN where
    undefined (e.g. no identical pairs)."""

    def per_pair(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return safe_divide(total, count.expand_as(total))

    long_share = per_pair(state["high_long"], state["n_long"])
    long_chance = per_pair(state["chance_long"], state["n_long"])
    identical_mean = per_pair(state["csm_identical_sum"], state["n_identical"])
    other_mean = per_pair(state["csm_other_sum"], state["n_other"])
    return {
        "identical_high_share": per_pair(state["high_identical"], state["n_identical"]),
        "identical_high_share_chance": per_pair(state["chance_identical"], state["n_identical"]),
        "long_identical_high_share": long_share,
        "long_identical_high_share_chance": long_chance,
        "repetition_score": safe_divide(long_share, long_chance),
        "identical_csm_mean": identical_mean,
        "other_csm_mean": other_mean,
        "identical_csm_ratio": safe_divide(identical_mean, other_mean),
    }


class RepetitionAccumulator(Accumulator):
    """Streaming identical-token statistics per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.

    States (float64 sums): high identical and high long identical pairs, their
    chance values and CSM sums over identical and other pairs (L, H); the
    numbers of identical, long identical and other pairs ().
    """

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        for name in ("high_identical", "high_long", "chance_identical", "chance_long", "csm_identical_sum", "csm_other_sum"):
            self.add_sum(name, n_layers, n_heads)
        for name in ("n_identical", "n_long", "n_other"):
            self.add_sum(name)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        # the class sums are shared with the sentence and region statistics
        if view.blockwise:
            self.fold(_repetition_update_blocks(view))
            return
        self.fold(_repetition_update(view.high_index, view.high_count, view.pair_weights, view.distance, view.seq_len, view.class_value_sums))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined (e.g. no identical pairs)."""
        return _repetition_compute(self.metric_state)
