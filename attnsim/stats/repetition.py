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

from typing import Dict, List, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

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


def high_identical_counts(view: PairView) -> torch.Tensor:
    """Per-head numbers of identical and of long identical pairs (d >= T/2) among each window's high pairs.

    Args:
        view: the batch's view (dense, blockwise or single-window); reads
            :attr:`~attnsim.stats.pairs.PairView.high_index` and :meth:`~attnsim.stats.pairs.PairView.pair_features`.

    Returns:
        (batch, layer, head, 2) in the view's ``sum_dtype``.
    """

    def select(f: Dict[str, torch.Tensor]) -> List[torch.Tensor]:  # one layer's high pairs: two (B, 1, H, S) masks
        return [f["identical"], f["identical"] & (f["distance"] >= view.seq_len / 2)]

    return view.high_counts(view.high_index, select)


def _repetition_update(
    high_counts: torch.Tensor,
    high_count: torch.Tensor,
    class_counts: torch.Tensor,
    class_counts_by_distance: torch.Tensor,
    class_value_sums: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`RepetitionAccumulator` states (arXiv:2512.21956, repetition heads).

    Args:
        high_counts: (B, L, H, 2) :func:`high_identical_counts`.
        high_count: (B, L, H) number of high pairs k.
        class_counts: (B, 5) pairs of each :data:`~attnsim.stats.pairs.CLASS_TABLES` row;
            class_counts_by_distance: (B, 5, T) the same at each distance (long identical pairs: d >= T/2, T the
            window length, also for a padded tail window). Their dtype sets the arithmetic's.
        class_value_sums: (B, L, H, 5) CSM summed over the pairs of each class of
            :data:`~attnsim.stats.pairs.PAIR_CLASSES`.

    Returns:
        State name -> float64 increment, (L, H) or () for the pair counts.
    """
    dtype = class_counts.dtype
    seq_len = class_counts_by_distance.shape[-1]
    far = (torch.arange(seq_len, device=class_counts.device) >= seq_len / 2).to(dtype)  # (T,)
    n, n_identical = class_counts[:, 0], class_counts[:, 3]  # (B,)
    n_long = (class_counts_by_distance[:, 3] * far).sum(-1)  # (B,)
    k = high_count.to(dtype)  # (B, L, H)
    rate = safe_divide(k, n[:, None, None].expand_as(k)).nan_to_num(0.0)  # (B, L, H): k / n
    return {
        "high_identical": high_counts[..., 0].sum(0).double(),
        "high_long": high_counts[..., 1].sum(0).double(),
        "chance_identical": (rate * n_identical[:, None, None]).sum(0).double(),
        "chance_long": (rate * n_long[:, None, None]).sum(0).double(),
        "csm_identical_sum": class_value_sums[..., 3].sum(0).double(),
        "csm_other_sum": class_value_sums[..., 4].sum(0).double(),
        "n_identical": n_identical.sum().double(),
        "n_long": n_long.sum().double(),
        "n_other": (n - n_identical).sum().double(),
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
        self.fold(_repetition_update(high_identical_counts(view), view.high_count, view.class_counts, view.class_counts_by_distance, view.class_value_sums))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined (e.g. no identical pairs)."""
        return _repetition_compute(self.metric_state)
