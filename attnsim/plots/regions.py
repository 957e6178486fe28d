"""Example windows: CSM heatmaps with the high-attention region outlined and sentence boundaries drawn."""

from __future__ import annotations

from typing import Any, Iterator, Tuple

import torch

from attnsim.plots.common import matrix_grid, sentence_starts
from attnsim.stats.pairs import attention_pair_values, high_pairs_top_fraction, pair_indices


def region_matrix(attention: torch.Tensor, valid: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """High-attention region of one window as symmetric T x T masks.

    Args:
        attention: (layer, head, T, T) attention probabilities of the window.
        valid: (T,) bool, tokens entering statistics.
        top_fraction: share of valid pairs in the region (see :mod:`attnsim.stats.attention_regions`).

    Returns:
        (layer, head, T, T) bool, True at (i, j) and (j, i) for every pair in the region.
    """
    n_layers, n_heads, seq_len, _ = attention.shape
    pairs = pair_indices(seq_len, attention.device)
    pair_mask = (valid[pairs[0]] & valid[pairs[1]])[None]  # (1, P)
    values = attention_pair_values(attention[:, None], pairs)  # (L, 1, H, P)
    region = high_pairs_top_fraction(values, pair_mask, top_fraction)[:, 0]  # (L, H, P)
    out = torch.zeros(n_layers, n_heads, seq_len, seq_len, dtype=torch.bool)
    out[..., pairs[0], pairs[1]] = region
    out[..., pairs[1], pairs[0]] = region
    return out


def example_regions(examples: Any, jaccard: torch.Tensor, top_fraction: float, max_tokens: int) -> Iterator[Tuple[str, Any]]:
    """One figure per example window: for every layer, the CSM of the head whose high-CSM pairs
    overlap most with its high-attention region (highest corpus ``jaccard``), region outlined.

    Args:
        examples: :class:`attnsim.findings.examples.Examples` with CSM and attention.
        jaccard: (layer, head) corpus Jaccard index, used to pick one head per layer.
        top_fraction: the run's ``stats.top_fraction``.
        max_tokens: longer windows are pooled (see :func:`attnsim.plots.common.matrix_grid`).
    """
    if examples is None or examples.csm is None or examples.attention is None:
        return
    heads = jaccard.detach().double().cpu().nan_to_num(-1.0).argmax(-1)  # (L,) one head per layer
    layers = torch.arange(heads.shape[0])
    for e in range(len(examples)):
        valid = examples.valid[e]
        length = int(valid.nonzero().max()) + 1 if valid.any() else 0
        if length < 2:
            continue
        region = region_matrix(examples.attention[:, e, :, :length, :length].float(), valid[:length], top_fraction)  # (L, H, T, T)
        csm = examples.csm[layers, e, heads, :length, :length].double().numpy()  # (L, T, T)
        outlines = region[layers, heads].numpy()
        titles = [f"L{int(l)} H{int(h)} J={float(jaccard[l, h]):.2f}" for l, h in zip(layers, heads)]
        starts = sentence_starts(examples.sentence_ids[e, :length].tolist())
        suptitle = (
            f"CSM of window {e} ({examples.label(e)}), per layer the head with the highest Jaccard overlap; "
            f"cyan: high-attention region (top {top_fraction:.0%} pairs), white lines: sentence boundaries"
        )
        yield f"figures/attention_regions/window{e}.png", matrix_grid(csm, titles, suptitle, max_tokens, examples.tokens[e][:length], starts, outlines, cols=3)
