"""Example windows: CSM heatmaps with the high-attention region outlined and sentence boundaries drawn."""

from __future__ import annotations

from typing import Any, Iterator, Tuple

import torch

from attnsim.plots.common import matrix_grid, sentence_starts
from attnsim.stats.pairs import pair_indices


def region_matrix(region: torch.Tensor, seq_len: int) -> torch.Tensor:
    """A set of pairs in pair space as symmetric T x T masks, for outlining.

    Args:
        region: (..., P) bool, e.g. a window's high-attention pairs per layer and head (layer, head, P).
        seq_len: T, with P = T(T-1)/2 pairs i < j in :func:`~attnsim.stats.pairs.pair_indices` order.

    Returns:
        (..., T, T) bool, True at (i, j) and (j, i) for every pair in ``region``.
    """
    pairs = pair_indices(seq_len, region.device)
    out = torch.zeros(*region.shape[:-1], seq_len, seq_len, dtype=torch.bool, device=region.device)
    out[..., pairs[0], pairs[1]] = region
    out[..., pairs[1], pairs[0]] = region
    return out


def example_regions(examples: Any, regions: Any, jaccard: torch.Tensor, top_fraction: float, max_tokens: int) -> Iterator[Tuple[str, Any]]:
    """One figure per example window: for every layer, the CSM of the head whose high-CSM pairs
    overlap most with its high-attention region (highest corpus ``jaccard``), region outlined.

    Args:
        examples: :class:`attnsim.findings.examples.Examples` with CSM, tokens and sentence ids.
        regions: (layer, E, head, P) bool high-attention pairs of the same E windows (recorded by the
            ``attention_regions`` finding), or None (no figure).
        jaccard: (layer, head) corpus Jaccard index, used to pick one head per layer.
        top_fraction: the run's ``stats.top_fraction`` (named in the title).
        max_tokens: longer windows are pooled (see :func:`attnsim.plots.common.matrix_grid`).
    """
    if examples is None or examples.csm is None or regions is None or getattr(examples, "blocks", None):
        return  # maps recorded pooled (long windows on the blockwise path): no T x T region outlines
    heads = jaccard.detach().double().cpu().nan_to_num(-1.0).argmax(-1)  # (L,) one head per layer
    layers = torch.arange(heads.shape[0])
    seq_len = examples.csm.shape[-1]
    for e in range(min(len(examples), regions.shape[1])):
        valid = examples.valid[e]
        length = int(valid.nonzero().max()) + 1 if valid.any() else 0
        if length < 2:
            continue
        outlines = region_matrix(regions[layers, e, heads], seq_len)[:, :length, :length].numpy()  # (L, n, n)
        csm = examples.csm[layers, e, heads, :length, :length].double().numpy()  # (L, n, n)
        titles = [f"L{int(l)} H{int(h)} J={float(jaccard[l, h]):.2f}" for l, h in zip(layers, heads)]
        starts = sentence_starts(examples.sentence_ids[e, :length].tolist())
        suptitle = (
            f"CSM of window {e} ({examples.label(e)}), per layer the head with the highest Jaccard overlap; "
            f"cyan: high-attention region (top {top_fraction:.0%} pairs), white lines: sentence boundaries"
        )
        yield f"figures/attention_regions/window{e}.png", matrix_grid(csm, titles, suptitle, max_tokens, examples.tokens[e][:length], starts, outlines, cols=3)
