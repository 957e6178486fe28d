"""Alignment statistics of encoder–decoder cross-attention (target rows × source columns).

For one sentence pair with ``n_t`` real target tokens (rows i = 0..n_t−1) and ``n_s`` real source
tokens (columns j = 0..n_s−1), special tokens included and padding excluded, each token is placed at
the centre of its share of the sentence: ``u_i = (i + ½)/n_t``, ``v_j = (j + ½)/n_s``.

- **Diagonal band** (monotone alignment; the diagonal scaled to the two lengths, as in the diagonal
  prior of Cohn et al. 2016 and the "diagonal" alignment of fast_align, Dyer et al. 2013): column j is
  in row i's band when ``|u_i − v_j| ≤ w`` (``w`` = ``stats.band_width``, default 0.1, a share of the
  sentence length). The column nearest the diagonal is always in the band, so no row's band is empty.
- **Band mass** of a head: the attention a row puts on its band, ``Σ_{j ∈ band(i)} A[i, j]``,
  averaged over every real target row of every pair (rows, not pairs, are weighted equally).
- **Chance**: the mass a uniform row over the real source tokens would put on the band,
  ``|band(i)| / n_s``, averaged over the same rows. It depends only on the lengths, so it is the same
  for every head; ``band_excess = band_mass − band_chance``.
- **Corpus map** (for figures): each pair's map resampled to a ``G × G`` grid of relative positions,
  where a token covers the interval ``[k/n, (k+1)/n)`` of its sentence and gives each bin the share of
  that interval inside the bin (:func:`relative_bins`; the column masses of a row are moved, so each
  resampled row still sums to 1). Row bins average the rows they cover (weighted by overlap) over the
  corpus. Pairs of different lengths then share one frame: a monotone alignment is a diagonal.

Everything is pure tensor code; the accumulator's states are sums (mergeable, reduced across ranks).
"""

from __future__ import annotations

from typing import Dict, Mapping, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide

BAND_WIDTH = 0.1
MAP_BINS = 20
SCALARS = ("band_mass", "band_mass_chance", "band_excess")


def relative_positions(n: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> torch.Tensor:
    """(n,) centres ``(k + ½)/n`` of n tokens spread over one sentence of length 1."""
    return (torch.arange(n, dtype=dtype, device=device) + 0.5) / n


def band_mask(n_target: int, n_source: int, width: float = BAND_WIDTH, device: torch.device | None = None) -> torch.Tensor:
    """(n_target, n_source) bool: column j is in row i's band when ``|u_i − v_j| ≤ width``, or is the column nearest the diagonal.

    Ties of the nearest column go to the lower index. ``width`` is a share of the sentence length (0..1).
    """
    u = relative_positions(n_target, device=device)[:, None]
    v = relative_positions(n_source, device=device)[None, :]
    gap = (u - v).abs()
    band = gap <= width + 1e-12  # float centres: a boundary that is exact on paper stays in
    nearest = gap.argmin(dim=1)  # first minimum: the lower column
    band[torch.arange(n_target, device=device), nearest] = True
    return band


def band_chance(band: torch.Tensor) -> torch.Tensor:
    """(n_target,) float64: the band mass of a uniform row over the ``n_source`` real source tokens, ``|band(i)| / n_source``."""
    return band.double().sum(-1) / band.shape[-1]


def band_mass(cross: torch.Tensor, band: torch.Tensor) -> torch.Tensor:
    """(..., n_target) attention mass on each row's band. ``cross``: (..., n_target, n_source) probabilities of the real tokens."""
    return (cross.double() * band.double()).sum(-1)


def relative_bins(n: int, bins: int = MAP_BINS, device: torch.device | None = None) -> torch.Tensor:
    """(n, bins) float64 share of token k's interval ``[k/n, (k+1)/n)`` that lies in bin ``[b/bins, (b+1)/bins)``; rows sum to 1."""
    lo = torch.arange(n, dtype=torch.float64, device=device)[:, None] / n
    edges = torch.arange(bins, dtype=torch.float64, device=device)[None, :] / bins
    overlap = (torch.minimum(lo + 1.0 / n, edges + 1.0 / bins) - torch.maximum(lo, edges)).clamp_min(0)
    return overlap * n  # fraction of the token's interval (length 1/n)


def _alignment_update(cross: torch.Tensor, width: float, bins: int) -> Dict[str, torch.Tensor]:
    """Increments of one pair. ``cross``: (L, H, n_t, n_s) probabilities restricted to the pair's real tokens."""
    n_t, n_s = cross.shape[-2:]
    band = band_mask(n_t, n_s, width, device=cross.device)
    rows_t, cols_s = relative_bins(n_t, bins, cross.device), relative_bins(n_s, bins, cross.device)
    moved = cross.double() @ cols_s  # (L, H, n_t, G): each row's mass per source bin
    return {
        "mass_sum": band_mass(cross, band).sum(-1),  # (L, H)
        "chance_sum": band_chance(band).sum(),
        "rows": torch.tensor(float(n_t), dtype=torch.float64, device=cross.device),
        "map_sum": rows_t.transpose(0, 1) @ moved,  # (G, n_t) @ (L, H, n_t, G) -> (L, H, G, G)
        "map_weight": rows_t.sum(0),  # (G,) rows' overlap with each target bin
    }


def _alignment_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``band_mass``, ``band_mass_chance``, ``band_excess`` (L, H) and ``corpus_map`` (L, H, G, G), float64; NaN without rows."""
    mass = safe_divide(state["mass_sum"], state["rows"].expand_as(state["mass_sum"]))
    chance = safe_divide(state["chance_sum"], state["rows"]).expand_as(mass)
    weight = state["map_weight"][:, None].expand_as(state["map_sum"])  # target bin of each row of the map
    return {"band_mass": mass, "band_mass_chance": chance.clone(), "band_excess": mass - chance, "corpus_map": safe_divide(state["map_sum"], weight)}


class AlignmentAccumulator(Accumulator):
    """Band mass, its chance value and the corpus map of cross-attention (see module docstring).

    Args:
        n_layers, n_heads: the decoder's layers and heads.
        width: the band's half-width ``w`` as a share of the sentence length.
        bins: G, bins per axis of the corpus map.
    """

    def __init__(self, n_layers: int, n_heads: int, width: float = BAND_WIDTH, bins: int = MAP_BINS):
        super().__init__()
        self.width, self.bins = float(width), int(bins)
        self.add_sum("mass_sum", n_layers, n_heads)
        self.add_sum("chance_sum")
        self.add_sum("rows")
        self.add_sum("map_sum", n_layers, n_heads, bins, bins)
        self.add_sum("map_weight", bins)

    def update(self, cross: Sequence[torch.Tensor], source_mask: torch.Tensor, target_mask: torch.Tensor) -> None:  # type: ignore[override]
        """Fold one batch in.

        Args:
            cross: L tensors (batch, head, T, S) of cross-attention probabilities (or one stacked (L, batch, head, T, S) tensor).
            source_mask, target_mask: (batch, S), (batch, T) 1 on real tokens; both right-padded.
        """
        stacked = torch.stack(tuple(cross)) if not isinstance(cross, torch.Tensor) else cross
        for b in range(stacked.shape[1]):
            n_s, n_t = int(source_mask[b].sum()), int(target_mask[b].sum())
            if n_s == 0 or n_t == 0:
                continue
            self.fold(_alignment_update(stacked[:, b, :, :n_t, :n_s], self.width, self.bins))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Statistics as float64 tensors (see :func:`_alignment_compute`)."""
        return _alignment_compute(self.metric_state)


__all__ = ["BAND_WIDTH", "MAP_BINS", "SCALARS", "AlignmentAccumulator", "band_chance", "band_mask", "band_mass", "relative_bins", "relative_positions"]
