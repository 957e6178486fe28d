"""What a finding hands on: :class:`Summary`, the one result type between findings and everything after.

Findings (:mod:`attnsim.findings`) produce it; the tracking tables
(:mod:`attnsim.tracking.summaries`), the workflows and the Python API read it.
It lives here, beside :mod:`attnsim.errors` and :mod:`attnsim.keys` at the bottom of
the import graph, so that no reader has to import the findings to know it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:  # typing only: importing this module imports neither torch nor pandas
    import pandas as pd
    import torch


@dataclass
class Summary:
    """What one finding measured over the corpus.

    Attributes:
        finding: the finding's name (the first part of its metric keys, :class:`~attnsim.keys.MetricKey`).
        scalars: statistic -> (layer, head) float tensor; logged per head (when listed in
            ``stats.per_head``), as layer means (when listed in ``stats.per_layer`` or
            ``stats.per_head``), as model means, and in the per-head table
            ``tables/<finding>_heads.csv``. NaN where a head's statistic is undefined.
        profiles: name -> (layer, head, K) float tensor (e.g. K distances); logged as the long
            table ``tables/<finding>_<name>.csv``.
        metrics: the finding's corpus-level numbers (no layer or head axis), name -> float;
            logged as ``<finding>/<name>``.
        tables: the finding's own tables, artifact path (``tables/....csv`` or ``.json``) -> pandas DataFrame.
        figure_data: what only the finding's own :meth:`~attnsim.findings.base.Finding.figures`
            reads, name -> value (e.g. the mean CSM matrix, (layer, head, T, T)); not logged.
        examples: one dict per drawn example window (``plots.examples``), for figures.
        windows: number of windows folded in.
        profile_index: name of a profile -> (K,) the index value of each of its K entries (e.g. the lower
            edge of each distance bin, :func:`attnsim.stats.distance.distance_bins`); a profile without
            one is indexed 0..K-1.
    """

    finding: str
    scalars: Dict[str, "torch.Tensor"]
    profiles: Dict[str, "torch.Tensor"] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)
    tables: Dict[str, "pd.DataFrame"] = field(default_factory=dict)
    figure_data: Dict[str, Any] = field(default_factory=dict)
    examples: List[Dict[str, Any]] = field(default_factory=list)
    windows: int = 0
    profile_index: Dict[str, "torch.Tensor"] = field(default_factory=dict)
