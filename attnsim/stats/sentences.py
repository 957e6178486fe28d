"""Sentence boundaries in the CSM, per layer and head (arXiv:2512.21956, same-sentence preference).

Sentences come from the corpus windows (``sentence_ids``; -1 for special
tokens and padding, which are in no sentence). A *same-sentence* pair is a
valid pair whose two tokens have the same sentence id >= 0; a *cross-sentence*
pair a valid pair of two tokens with different sentence ids >= 0. Per layer l
and head h, summed over windows (k = the window's number of high pairs, n its
valid pairs, n_s its same-sentence pairs):

- ``same_sentence_share``: share of high pairs in the same sentence.
- ``same_sentence_share_chance``: the same share under a uniform choice of
  the window's k high pairs among its valid pairs: sum k * n_s / n over sum k,
  i.e. the share of all valid pairs in the same sentence, weighted by k.
- ``same_sentence_preference``: share - chance (difference of shares).
- ``same_sentence_ratio``: share / chance (1 = no preference; the paper's
  "preference above 33%" reads as ratio > 1.33).
- ``same_sentence_share_distance_matched``: the same-sentence share expected
  if every high pair kept its distance d but were placed uniformly among the
  window's valid pairs at distance d (sum over high pairs of n_s,d / n_d,
  over sum k). Nearby tokens share a sentence more often; this is the chance
  value with distance held fixed.
- ``boundary_contrast``: share / distance-matched share. Above 1, high pairs
  stop at sentence boundaries more than their distances explain (a drop
  across boundaries).
- ``within_sentence_spread``: mean distance of same-sentence high pairs
  divided by the mean distance of the same-sentence pairs of their windows
  (each window weighted by its number of same-sentence high pairs): 1 when
  high pairs spread over whole sentences, below 1 when they stay near the
  diagonal.
- ``csm_same_mean``, ``csm_cross_mean``: mean CSM of same-sentence and of
  cross-sentence pairs (CSM units).
"""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = (
    "same_sentence_share",
    "same_sentence_share_chance",
    "same_sentence_preference",
    "same_sentence_ratio",
    "same_sentence_share_distance_matched",
    "boundary_contrast",
    "within_sentence_spread",
    "csm_same_mean",
    "csm_cross_mean",
)


def high_sentence_counts(view: PairView) -> torch.Tensor:
    """Per-head sums over each window's high pairs: same-sentence pairs, their distances, and the distance-matched
    chance of each high pair (``n_s,d / n_d`` at its distance d).

    Args:
        view: the batch's view (dense, blockwise or single-window); reads :attr:`~attnsim.stats.pairs.PairView.high_index`,
            :meth:`~attnsim.stats.pairs.PairView.pair_features` and
            :attr:`~attnsim.stats.pairs.PairView.class_counts_by_distance`.

    Returns:
        (batch, layer, head, 3) in the view's ``sum_dtype``: same-sentence high pairs, the sum of their distances
        (tokens), and the distance-matched chance summed over the high pairs.
    """
    table = view.class_counts_by_distance  # (B, 5, T): valid, same, cross, identical, neither
    same_at = safe_divide(table[:, 1], table[:, 0]).nan_to_num(0.0)  # (B, T): share of same-sentence pairs at each distance

    def weigh(f: Dict[str, torch.Tensor]) -> torch.Tensor:  # one layer's high pairs (B, 1, H, S) -> (B, 1, H, S, 3)
        same = f["same"].to(view.sum_dtype)
        distance = f["distance"].clamp_min(0)  # a pair without a distance (-1) is in no sentence (image patches)
        matched = same_at[:, None, None, :].expand(*distance.shape[:-1], -1).gather(-1, distance) * f["valid"].to(view.sum_dtype)
        return torch.stack([same, same * distance.to(view.sum_dtype), matched], -1)

    return view.high_sums(view.high_index, weigh)


def _sentence_update(
    high_counts: torch.Tensor,
    high_count: torch.Tensor,
    class_counts: torch.Tensor,
    class_counts_by_distance: torch.Tensor,
    class_value_sums: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`SentenceAccumulator` states (arXiv:2512.21956, same-sentence preference).

    Args:
        high_counts: (B, L, H, 3) :func:`high_sentence_counts`.
        high_count: (B, L, H) number of high pairs k.
        class_counts: (B, 5) pairs of each :data:`~attnsim.stats.pairs.CLASS_TABLES` row;
            class_counts_by_distance: (B, 5, T) the same at each distance. Their dtype sets the arithmetic's.
        class_value_sums: (B, L, H, 5) CSM summed over the pairs of each class of
            :data:`~attnsim.stats.pairs.PAIR_CLASSES`.

    Returns:
        State name -> float64 increment, (L, H) or () for ``n_same`` and ``n_cross``.
    """
    dtype = class_counts.dtype
    k = high_count.to(dtype)  # (B, L, H)
    n, n_same = class_counts[:, 0], class_counts[:, 1]  # (B,)
    share = safe_divide(n_same, n).nan_to_num(0.0)  # (B,)
    length = torch.arange(class_counts_by_distance.shape[-1], dtype=dtype, device=class_counts.device)
    mean_same_distance = safe_divide((class_counts_by_distance[:, 1] * length).sum(-1), n_same).nan_to_num(0.0)  # (B,)
    return {
        "high": k.sum(0).double(),
        "high_same": high_counts[..., 0].sum(0).double(),
        "chance_same": (k * share[:, None, None]).sum(0).double(),
        "matched_same": high_counts[..., 2].sum(0).double(),
        "high_same_distance": high_counts[..., 1].sum(0).double(),
        "chance_same_distance": (high_counts[..., 0] * mean_same_distance[:, None, None]).sum(0).double(),
        "csm_same_sum": class_value_sums[..., 1].sum(0).double(),
        "csm_cross_sum": class_value_sums[..., 2].sum(0).double(),
        "n_same": n_same.sum().double(),
        "n_cross": class_counts[:, 2].sum().double(),
    }


def _sentence_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`SentenceAccumulator` states, each (layer, head) float64; NaN where
    undefined (no high pairs, no same-sentence pairs)."""
    share = safe_divide(state["high_same"], state["high"])
    chance = safe_divide(state["chance_same"], state["high"])
    matched = safe_divide(state["matched_same"], state["high"])
    return {
        "same_sentence_share": share,
        "same_sentence_share_chance": chance,
        "same_sentence_preference": share - chance,
        "same_sentence_ratio": safe_divide(share, chance),
        "same_sentence_share_distance_matched": matched,
        "boundary_contrast": safe_divide(share, matched),
        "within_sentence_spread": safe_divide(state["high_same_distance"], state["chance_same_distance"]),
        "csm_same_mean": safe_divide(state["csm_same_sum"], state["n_same"].expand_as(state["csm_same_sum"])),
        "csm_cross_mean": safe_divide(state["csm_cross_sum"], state["n_cross"].expand_as(state["csm_cross_sum"])),
    }


class SentenceAccumulator(Accumulator):
    """Streaming same-sentence statistics of high-CSM pairs per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.

    States (float64 sums, (L, H) unless noted): high pairs, same-sentence high
    pairs, their chance and distance-matched chance, distance sums of
    same-sentence high pairs and its chance, CSM sums over same- and
    cross-sentence pairs, and the numbers of same- and cross-sentence pairs ().
    """

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        for name in ("high", "high_same", "chance_same", "matched_same", "high_same_distance", "chance_same_distance", "csm_same_sum", "csm_cross_sum"):
            self.add_sum(name, n_layers, n_heads)
        self.add_sum("n_same")
        self.add_sum("n_cross")

    def update(self, view: PairView) -> None:  # type: ignore[override]
        # the class sums are shared with the repetition and region statistics
        self.fold(_sentence_update(high_sentence_counts(view), view.high_count, view.class_counts, view.class_counts_by_distance, view.class_value_sums))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined (no high pairs, no same-sentence pairs)."""
        return _sentence_compute(self.metric_state)
