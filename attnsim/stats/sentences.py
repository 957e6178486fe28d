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
from attnsim.stats.pairs import PairView, head_sums

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


def _sentence_update(
    high_index: torch.Tensor,
    high_count: torch.Tensor,
    pair_weights: torch.Tensor,
    distance: torch.Tensor,
    distance_onehot: torch.Tensor,
    class_value_sums: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`SentenceAccumulator` states.

    Args:
        high_index: (B, L, H, S) int64 pair indices of the high pairs, P in unused slots.
        high_count: (L, B, H) number of high pairs k.
        pair_weights: (B, P, 5) 0/1 pair classes: valid, same, cross, identical, other.
        distance: (P,) int64 distance of each pair; distance_onehot: (P, T) its one-hot.
        class_value_sums: (L, B, H, 5) CSM summed over the pairs of each class.

    Returns:
        State name -> float64 increment.
    """
    valid, same, cross = pair_weights[..., 0], pair_weights[..., 1], pair_weights[..., 2]
    length = distance.float()  # (P,)
    # share of same-sentence pairs among valid pairs at each distance, per window: (B, T)
    same_at = safe_divide(same @ distance_onehot, valid @ distance_onehot).nan_to_num(0.0)
    matched = same_at[:, distance] * valid  # (B, P): n_s,d / n_d at the pair's distance
    counts = head_sums(high_index, torch.stack([same, same * length, matched], -1))  # (L, B, H, 3)
    k = high_count.float()  # (L, B, H)
    n = valid.sum(-1)  # (B,)
    n_same = same.sum(-1)  # (B,)
    share = safe_divide(n_same, n).nan_to_num(0.0)  # (B,)
    mean_same_distance = safe_divide((same * length).sum(-1), n_same).nan_to_num(0.0)  # (B,)
    return {
        "high": k.sum(1).double(),
        "high_same": counts[..., 0].sum(1).double(),
        "chance_same": (k * share[:, None]).sum(1).double(),
        "matched_same": counts[..., 2].sum(1).double(),
        "high_same_distance": counts[..., 1].sum(1).double(),
        "chance_same_distance": (counts[..., 0] * mean_same_distance[:, None]).sum(1).double(),
        "csm_same_sum": class_value_sums[..., 1].sum(1).double(),
        "csm_cross_sum": class_value_sums[..., 2].sum(1).double(),
        "n_same": n_same.sum().double(),
        "n_cross": cross.sum().double(),
    }


def _sentence_update_blocks(view: PairView) -> Dict[str, torch.Tensor]:
    """:func:`_sentence_update` from a :class:`~attnsim.stats.pairs.blocks.BlockPairView`: the high pairs' classes
    decoded from their indices, the windows' pair counts from its tables by distance (the same increments)."""
    table = view.by_distance  # (B, 5, T) float64: valid, same, cross, identical, neither
    valid_at, same_at_count = table[:, 0], table[:, 1]
    same_at = safe_divide(same_at_count, valid_at).nan_to_num(0.0)  # (B, T)
    parts = []
    for layer in range(view.n_layers):  # one layer's k pairs per head at a time (bounded memory at long T)
        f = view.pair_features(view.high_index[:, layer : layer + 1])  # (B, 1, H, S)
        same = f["same"].double()
        distance = f["distance"]
        matched = same_at[:, None, None, :].expand(*distance.shape[:-1], -1).gather(-1, distance) * f["valid"].double()
        parts.append(torch.stack([same.sum(-1), (same * distance.double()).sum(-1), matched.sum(-1)], -1))
    counts = torch.cat(parts, 1).transpose(0, 1)  # (L, B, H, 3)
    k = view.high_count.double()
    n = valid_at.sum(-1)
    n_same = same_at_count.sum(-1)
    share = safe_divide(n_same, n).nan_to_num(0.0)
    length = torch.arange(view.seq_len, dtype=torch.float64, device=table.device)
    mean_same_distance = safe_divide((same_at_count * length).sum(-1), n_same).nan_to_num(0.0)
    class_sums = view.class_value_sums.double()
    return {
        "high": k.sum(1),
        "high_same": counts[..., 0].sum(1),
        "chance_same": (k * share[:, None]).sum(1),
        "matched_same": counts[..., 2].sum(1),
        "high_same_distance": counts[..., 1].sum(1),
        "chance_same_distance": (counts[..., 0] * mean_same_distance[:, None]).sum(1),
        "csm_same_sum": class_sums[..., 1].sum(1),
        "csm_cross_sum": class_sums[..., 2].sum(1),
        "n_same": n_same.sum(),
        "n_cross": table[:, 2].sum(),
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
        if view.blockwise:
            self.fold(_sentence_update_blocks(view))
            return
        self.fold(_sentence_update(view.high_index, view.high_count, view.pair_weights, view.distance, view.distance_onehot, view.class_value_sums))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined (no high pairs, no same-sentence pairs)."""
        return _sentence_compute(self.metric_state)
