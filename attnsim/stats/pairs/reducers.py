"""The reducer protocol: per-batch sums a statistic folds in a view's window walk, written once for every path.

A view (dense :class:`~attnsim.stats.pairs.PairView`, blockwise :class:`~attnsim.stats.pairs.blocks.BlockPairView`,
or a single-window dense view) walks its batch once per :data:`SOURCES` entry and hands every part of the walk, a
:class:`Piece`, to each registered :class:`ChunkReducer` of that source. The dense path hands one piece per chunk of
windows (every layer, every query row), except its attention walk on a CPU, which hands one piece per layer and chunk
of windows (the captured layer's maps as they are, every query row); the blockwise path one piece per window, layer and
block of query rows. A
reducer's :meth:`~ChunkReducer.update` is written once against the piece's published fields and serves both paths:
sums over pieces are sums over windows, layers and rows.

Example (a reducer of the attention each key receives, on a single window of uniform attention;
``tests/test_docstring_examples.py`` runs it):

    >>> import torch
    >>> from attnsim.stats.pairs import PairView
    >>> class KeyMass(ChunkReducer):
    ...     source = "attention"
    ...
    ...     def __init__(self, view):
    ...         self.mass = torch.zeros(view.batch_size, view.n_layers, view.n_heads, view.seq_len)
    ...
    ...     def update(self, view, piece):  # piece.values: (c, l, H, rows, K) probabilities of the piece's query rows
    ...         self.mass[piece.windows, piece.layers, :, : piece.keys] += piece.values.sum(-2)
    >>> window = {"attention_mask": torch.ones(4, dtype=torch.long), "special_mask": torch.zeros(4, dtype=torch.bool),
    ...           "sentence_ids": torch.zeros(4, dtype=torch.long), "input_ids": torch.arange(4)}
    >>> view = PairView.single_window(torch.randn(1, 1, 4, 2), window, torch.full((1, 1, 4, 4), 0.25))
    >>> view.reduced(KeyMass).mass.tolist()  # (batch, layer, head, key): each key gets a quarter of 4 rows
    [[[[1.0, 1.0, 1.0, 1.0]]]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple

import torch

SOURCES = ("csm", "attention")
"""The two window walks of a view: what a :class:`ChunkReducer` receives per :class:`Piece`."""


@dataclass
class Piece:
    """One part of a window walk: windows ``start..stop-1``, layers ``layer..layer+l-1``, query rows ``rows``.

    Attributes:
        start, stop: the windows of the batch the piece holds (c = stop - start).
        layer: the first layer the piece holds (l = ``values.shape[1]`` layers).
        rows: (r0, r1) the query rows (tokens i) the piece holds; (0, T) on the dense path.
        pairs: (p0, p1) for a ``csm`` piece: the pair indices it holds, those of pairs (i, j), i < j, with
            r0 <= i < r1 (pairs are numbered row by row, so they are one contiguous range).
        keys: for an ``attention`` piece: K, the keys (columns j) it holds, 0..K-1; later keys have probability 0
            for its rows (a causal model's block). T on the dense path.
        values: ``csm``: (c, l, head, p1 - p0) float32 CSM of the pairs, 0 at invalid pairs. ``attention``:
            (c, l, head, r1 - r0, K) float32 attention probabilities, query-major (row i holds query i).
    """

    start: int
    stop: int
    layer: int
    rows: Tuple[int, int]
    pairs: Tuple[int, int]
    keys: int
    values: torch.Tensor

    @property
    def windows(self) -> slice:
        """The piece's windows as a slice of the batch axis."""
        return slice(self.start, self.stop)

    @property
    def layers(self) -> slice:
        """The piece's layers as a slice of the layer axis."""
        return slice(self.layer, self.layer + self.values.shape[1])


class ChunkReducer:
    """Per-batch sums a statistic folds piece by piece in one of a view's window walks.

    A statistic whose sums need the CSM or the attention of every pair defines a reducer next to it and lists
    it in its accumulator's ``reducers``; the finding registers it with the view (through the view factory), so
    that the single walk of :data:`SOURCES` ``source`` serves it along with every other statistic, on the dense
    and on the blockwise path alike. A reducer not registered in time still gets its sums, from a walk of its
    own (correct, only slower).

    Subclasses set :attr:`source` and implement ``__init__(view)`` (allocate per-batch results on
    ``view.device``, zero where :meth:`update` adds), :meth:`update` and, if needed, :meth:`finish`. ``view`` is
    the batch's :class:`~attnsim.stats.pairs.PairView` (annotated ``Any``: the view module imports this one), read
    through its published members only.
    """

    source: str = "csm"
    """``csm`` or ``attention``: which walk hands its pieces to :meth:`update` (see :class:`Piece`)."""

    def __init__(self, view: Any) -> None:
        pass

    def update(self, view: Any, piece: Piece) -> None:
        """Fold one piece of the walk into the reducer's sums (every piece is handed over exactly once)."""
        raise NotImplementedError

    def finish(self, view: Any) -> None:
        """Called once after the last piece of the walk (nothing by default)."""


__all__ = ["SOURCES", "Piece", "ChunkReducer"]
