"""Example windows: CSM heatmaps with the high-attention region outlined and sentence boundaries drawn."""

from __future__ import annotations

from typing import Any, Iterator, Tuple

import torch

from attnsim.plots.common import layer_note, matrix_grid, sentence_starts, shown_layers
from attnsim.stats.pairs import pair_indices
from attnsim.stats.pairs.blocks import decode_pairs


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


def pooled_region(index: torch.Tensor, seq_len: int, block: int, cells: int) -> torch.Tensor:
    """Listed pairs as symmetric masks of pooled cells: a cell is outlined when any of its pairs is listed
    (as pooling :func:`region_matrix`'s T x T mask by the figures' rule and keeping non-zero cells).

    Args:
        index: (..., S) int pair indices (:func:`~attnsim.stats.pairs.blocks.decode_pairs` order), P in unused slots.
        seq_len: T.
        block: tokens per cell.
        cells: cells per axis (pairs beyond are dropped).

    Returns:
        (..., cells, cells) bool.
    """
    rows, cols, listed = decode_pairs(index, seq_len)
    rows, cols = rows // block, cols // block
    listed = listed & (rows < cells) & (cols < cells)
    flat = torch.zeros(*index.shape[:-1], cells * cells + 1, dtype=torch.bool)
    spare = cells * cells  # unlisted slots land here
    flat.scatter_(-1, torch.where(listed, rows * cells + cols, spare), True)
    flat.scatter_(-1, torch.where(listed, cols * cells + rows, spare), True)
    return flat[..., :spare].reshape(*index.shape[:-1], cells, cells)


def example_regions(examples: Any, regions: Any, jaccard: torch.Tensor, top_fraction: float, max_tokens: int) -> Iterator[Tuple[str, Any]]:
    """One figure per example window: for each layer :func:`~attnsim.plots.common.shown_layers` picks by the
    layer mean of ``jaccard`` (every layer of models up to six layers deep), the CSM of the head whose
    high-CSM pairs overlap most with its high-attention region (highest corpus ``jaccard``), region outlined.

    Args:
        examples: :class:`attnsim.findings.examples.Examples` with CSM, tokens and sentence ids.
        regions: (layer, E, head, P) bool high-attention pairs of the same E windows (recorded by the
            ``attention_regions`` finding), or None (no figure); for examples recorded pooled
            (:attr:`~attnsim.findings.examples.Examples.blocks`, long windows on the blockwise path) the
            (layer, E, head, S) int pair indices, outlined by pooled cells (:func:`pooled_region`).
        jaccard: (layer, head) corpus Jaccard index, used to pick one head per layer.
        top_fraction: the run's ``stats.top_fraction`` (named in the title).
        max_tokens: longer windows are pooled (see :func:`attnsim.plots.common.matrix_grid`).
    """
    if examples is None or examples.csm is None or regions is None:
        return
    pooled = bool(getattr(examples, "blocks", None))
    if pooled == bool(regions.dtype == torch.bool):
        return  # regions recorded for the other kind of example record
    shown = shown_layers(jaccard.shape[0], jaccard)
    note = layer_note(shown, jaccard.shape[0], "mean Jaccard index", "every head's Jaccard index in tables/attention_regions_heads.csv")
    layers = torch.tensor(shown)
    heads = jaccard.detach().double().cpu().nan_to_num(-1.0).argmax(-1)[layers]  # one head per shown layer
    seq_len = examples.valid.shape[-1]
    for e in range(min(len(examples), regions.shape[1])):
        valid = examples.valid[e]
        length = int(valid.nonzero().max()) + 1 if valid.any() else 0
        if length < 2:
            continue
        block = None
        if pooled:  # (L, c, c) maps and outlines of cells of `block` tokens, no T x T mask
            maps, block, _ = examples.maps("csm", e, max_tokens)
            csm = maps[layers.numpy(), heads.numpy()]
            outlines = pooled_region(regions[layers, e, heads], seq_len, block, csm.shape[-1]).numpy()
        else:
            outlines = region_matrix(regions[layers, e, heads], seq_len)[:, :length, :length].numpy()  # (L, n, n)
            csm = examples.csm[layers, e, heads, :length, :length].double().numpy()  # (L, n, n)
        titles = [f"L{int(layer)} H{int(h)} J={float(jaccard[layer, h]):.2f}" for layer, h in zip(layers, heads)]
        starts = sentence_starts(examples.sentence_ids[e, :length].tolist())
        suptitle = (
            f"CSM of window {e} ({examples.label(e)}), per layer the head with the highest Jaccard overlap; "
            f"cyan: high-attention region (top {top_fraction:.0%} pairs), white lines: sentence boundaries" + (f"; {note}" if note else "")
        )
        yield (
            f"figures/attention_regions/window{e}.png",
            matrix_grid(csm, titles, suptitle, max_tokens, examples.tokens[e][:length], starts, outlines, cols=3, block=block),
        )
