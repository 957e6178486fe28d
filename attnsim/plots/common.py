"""Shared drawing helpers: pooling long axes, layer x head heatmaps, matrix grids.

Readability rule: a T x T matrix with T > ``max_tokens`` is average-pooled
(NaN-aware) over blocks of ``ceil(T / max_tokens)`` tokens before drawing; a
pooled cell is labelled with its first token. Token labels are drawn at
:data:`TOKEN_FONT` points (at least 8), cut to :data:`TOKEN_CHARS` characters
with "…", and thinned to every k-th cell so that two labels are at least
:data:`TOKEN_SPACING` inches apart. Layers and heads are labelled 0-indexed, as
in metric keys, and every figure says so. No PNG artifact is larger than
:data:`attnsim.tracking.png.PNG_LIMIT` (the run sink encodes every figure).

Layer rule (:func:`shown_layers`): a figure that draws each layer separately (matrices, profiles,
example windows) draws every layer of a model of up to :data:`MOST_LAYERS` layers; of a deeper
model, the first, middle and last layer and the layers with the highest and lowest layer mean of
the figure's statistic (at most five), and its title says which (:func:`layer_note`). Every layer's
values stay in the run's tables. Layer x head mosaics of scalars are one image and show every layer.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import matplotlib.pyplot as plt
import numpy as np

from attnsim.plots.fonts import check_text

if TYPE_CHECKING:  # torch only for annotations: `attnsim compare` draws with this module and imports no torch
    import torch

INDEX_NOTE = "layers and heads 0-indexed"
TOKEN_FONT = 8  # points: token labels of matrices and strips
TOKEN_SPACING = TOKEN_FONT * 1.35 / 72  # inches between two token labels (a line and a third)
TOKEN_CHARS = 12  # longer token labels are cut, ending in "…"
MOST_LAYERS = 6  # figures drawn per layer show every layer of models up to this deep (module docstring, layer rule)


def shown_layers(n_layers: int, values=None, most: int = MOST_LAYERS) -> List[int]:
    """The layers a per-layer figure draws (the layer rule of the module docstring), ascending.

    Args:
        n_layers: layers of the model (1 or more).
        values: the figure's statistic, (layer,) or (layer, head, ...) (tensor or array), or None; its
            layer means (NaN-aware over all but the first axis) pick the extreme layers.
        most: models with at most this many layers show every layer.

    Returns:
        Every layer when ``n_layers <= most``; else layer 0, ``n_layers // 2`` and ``n_layers - 1``,
        plus the layers of the highest and lowest finite layer mean (the first of ties): 3 to 5 layers.
    """
    if n_layers <= most:
        return list(range(n_layers))
    chosen = {0, n_layers // 2, n_layers - 1}
    means = _layer_means(values, n_layers)
    if means is not None and np.isfinite(means).any():
        finite = np.where(np.isfinite(means), means, np.nan)
        chosen |= {int(np.nanargmax(finite)), int(np.nanargmin(finite))}
    return sorted(chosen)


def _layer_means(values, n_layers: int) -> Optional[np.ndarray]:
    if values is None:
        return None
    data = as_float64(values).reshape(n_layers, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN layer stays NaN
        return np.nanmean(data, axis=1)


def layer_note(layers: Sequence[int], n_layers: int, statistic: str, where: str = "every layer in the run's tables") -> str:
    """The title's statement of :func:`shown_layers`' choice: empty when every layer is shown, else e.g.
    "layers 0, 7, 15, 22, 29 of 30: first, middle, last, highest and lowest mean CSM; every layer in the run's tables"
    (``where`` says where the layers not drawn are)."""
    if len(layers) == n_layers:
        return ""
    listed = ", ".join(str(layer) for layer in layers)
    return f"layers {listed} of {n_layers}: first, middle, last, highest and lowest {statistic}; {where}"


def short_label(text: str, chars: int = TOKEN_CHARS) -> str:
    """``text`` cut to ``chars`` characters, the last being "…" when cut.

    A character whose font is an extra not installed (the CJK font, ``attnsim[cjk]``) is logged once per process
    (:func:`attnsim.plots.fonts.check_text`).
    """
    text = str(text)
    check_text(text)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def labels_fitting(inches: float, most: int = 32) -> int:
    """How many token labels fit along ``inches`` at :data:`TOKEN_SPACING` (at least 2, at most ``most``)."""
    return max(2, min(most, int(inches / TOKEN_SPACING)))


FIXED_LAYOUT = "attnsim_fixed_layout"  # attribute marking a figure laid out by hand (see fixed_layout)


def fixed_layout(fig):
    """Mark ``fig`` as laid out by hand, so that it is saved as is.

    The tracking sink saves other figures with ``bbox_inches="tight"``, which draws a figure
    a second time to measure it (about twice the cost of saving); a figure whose axes are
    placed in inches (:func:`inch_axes`) needs no such pass.
    """
    setattr(fig, FIXED_LAYOUT, True)
    return fig


def has_fixed_layout(fig) -> bool:
    """Whether ``fig`` was marked by :func:`fixed_layout`."""
    return bool(getattr(fig, FIXED_LAYOUT, False))


def inch_axes(width: float, height: float, left: float, right: float, bottom: float, top: float) -> Tuple[object, object]:
    """A figure holding one axes of ``width`` x ``height`` inches with the given margins (inches), marked fixed.

    Returns:
        (figure, axes).
    """
    fig_w, fig_h = width + left + right, height + bottom + top
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((left / fig_w, bottom / fig_h, width / fig_w, height / fig_h))
    return fixed_layout(fig), ax


def wrap_title(text: str, width: float, fontsize: float = 9) -> List[str]:
    """``text`` (lines kept) wrapped to about ``width`` inches at ``fontsize`` points (a character is ~0.55 em wide)."""
    chars = max(20, int(width * 72 / (0.55 * fontsize)))
    return [piece for line in text.split("\n") for piece in (textwrap.wrap(line, chars) or [""])]


def scale_strip(ax, x0: float, x1: float, rows: int, cmap, label: str = "scaled within each panel") -> None:
    """A colour scale from the colormap's bottom (min) to top (max), drawn as an image between image
    columns ``x0`` and ``x1`` over ``rows`` rows of the axes' image, with its labels.

    For mosaics whose panels are each scaled to 0..1 it replaces a colorbar, whose extra axes costs
    about as much to draw as the rest of a small figure. The caller leaves that space empty (NaN) and
    sets the axes limits.
    """
    ramp = np.linspace(1.0, 0.0, 256)[:, None]  # top = max
    ax.imshow(ramp, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest", extent=(x0, x1, rows - 0.5, -0.5))
    ax.text(x1, -0.5, " max", fontsize=8, va="top", ha="left", clip_on=False)
    ax.text(x1, rows - 0.5, " min", fontsize=8, va="bottom", ha="left", clip_on=False)
    ax.text(x1, rows / 2, f" {label}", fontsize=8, va="center", ha="left", rotation=90, clip_on=False)


def colorbar_beside(fig, ax, image, label: str, gap: float = 0.1, width: float = 0.12) -> None:
    """A colorbar as tall as ``ax``, ``gap`` inches to its right and ``width`` inches wide (for figures from :func:`inch_axes`)."""
    fig_w, fig_h = fig.get_size_inches()
    box = ax.get_position()
    cax = fig.add_axes((box.x1 + gap / fig_w, box.y0, width / fig_w, box.height))
    fig.colorbar(image, cax=cax, label=label)
    cax.yaxis.label.set_size(9)
    cax.tick_params(labelsize=9)
    cax.yaxis.get_offset_text().set_fontsize(9)


def pool_matrix(matrix: np.ndarray, max_tokens: int) -> tuple:
    """Average-pool the last two axes to at most ``max_tokens`` cells (NaN-aware).

    Returns:
        (pooled array, block size in tokens).
    """
    size = matrix.shape[-1]
    block = max(1, math.ceil(size / max_tokens))
    if block == 1:
        return matrix, 1
    cells = math.ceil(size / block)
    pad = cells * block - size
    padded = np.pad(matrix, [(0, 0)] * (matrix.ndim - 2) + [(0, pad), (0, pad)], constant_values=np.nan)
    shaped = padded.reshape(*matrix.shape[:-2], cells, block, cells, block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks stay NaN
        pooled = np.nanmean(shaped, axis=(-3, -1))
    return pooled, block


def thin_ticks(labels: Sequence[str], block: int, most: int = 32) -> tuple:
    """Positions and labels of at most ``most`` ticks for an axis of pooled cells."""
    cells = math.ceil(len(labels) / block)
    step = max(1, math.ceil(cells / most))
    positions = list(range(0, cells, step))
    return positions, [labels[p * block] for p in positions]


def as_float64(values) -> np.ndarray:
    """``values`` (a torch tensor, NumPy array or number) as a float64 NumPy array, without importing torch."""
    if hasattr(values, "detach"):  # a torch tensor, possibly on a GPU or requiring grad
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def layer_head_heatmap(values: torch.Tensor, title: str, chance: Optional[torch.Tensor] = None, cmap: str = "viridis", annotate: Optional[int] = None):
    """A (layer, head) heatmap with values written in cells; ``chance`` (scalar or (layer, head)) in the title.

    Args:
        values: (layer, head).
        annotate: write the values of only this many highest cells (each text costs as much to draw
            as a small image); None writes every cell of grids up to 200 cells.
    """
    data = as_float64(values)
    n_layers, n_heads = data.shape
    # cells of 0.55 x 0.45 inch (rows of 0.2 inch, still a 9-point label each, past 12 layers: the pixels grow less
    # with depth); margins for the axis labels, the two-line title and the colorbar
    fig, ax = inch_axes(0.55 * n_heads, (0.45 if n_layers <= 12 else 0.2) * n_layers, left=0.6, right=1.1, bottom=0.5, top=0.6)
    image = ax.imshow(np.ma.masked_invalid(data), cmap=plt.get_cmap(cmap).with_extremes(bad="white"), aspect="auto")
    colorbar_beside(fig, ax, image, title.rsplit("/", 1)[-1] if " " not in title else "")  # a metric name "finding/stat": its statistic
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.tick_params(labelsize=9)
    ax.set_xlabel("head", fontsize=9)
    ax.set_ylabel("layer", fontsize=9)
    finite = data[np.isfinite(data)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0
    if annotate is not None:
        order = np.argsort(np.where(np.isfinite(data), data, -np.inf), axis=None)[::-1][: min(annotate, finite.size)]
        cells = [np.unravel_index(i, data.shape) for i in order]
    else:
        cells = list(np.ndindex(data.shape)) if n_heads * n_layers <= 200 else []
    for layer, head in cells:
        value = data[layer, head]
        if not np.isfinite(value):  # undefined: a white cell, no text
            continue
        ax.text(head, layer, f"{value:.2g}", ha="center", va="center", fontsize=9, color="white" if value < mid else "black")
    suffix = ""
    if chance is not None:
        suffix = f" (chance {float(np.nanmean(as_float64(chance))):.3g})"
    shown = f"; values in the {annotate} highest cells" if annotate is not None and annotate < data.size else ""
    ax.set_title("\n".join(wrap_title(f"{title}{suffix}\n{INDEX_NOTE}{shown}", 0.55 * n_heads + 1.2, 9)), fontsize=9)
    return fig


def mask_edges(mask: np.ndarray) -> np.ndarray:
    """Line segments along the cell edges where a 2-D bool ``mask`` changes (its outline), in image
    coordinates (cell (r, c) spans c - 0.5..c + 0.5, r - 0.5..r + 0.5).

    Returns:
        (segments, 2, 2) array of ((x0, y0), (x1, y1)), for one ``LineCollection``.
    """
    padded = np.pad(mask, 1)  # cells outside the image count as unmasked
    rows, cols = np.nonzero(padded[1:, 1:-1] != padded[:-1, 1:-1])  # edge above cell (rows, cols) of `mask`, rows 0..R
    horizontal = np.stack([np.stack([cols - 0.5, rows - 0.5], -1), np.stack([cols + 0.5, rows - 0.5], -1)], 1)
    rows, cols = np.nonzero(padded[1:-1, 1:] != padded[1:-1, :-1])  # edge left of cell (rows, cols), cols 0..C
    vertical = np.stack([np.stack([cols - 0.5, rows - 0.5], -1), np.stack([cols - 0.5, rows + 0.5], -1)], 1)
    return np.concatenate([horizontal, vertical]).astype(float)


def draw_segments(ax, segments, **style) -> None:
    """Draw line segments ((x0, y0), (x1, y1)) as one line broken by NaNs: one path, however many segments
    (a ``LineCollection`` builds a path per segment, which dominates drawing thousands of cell edges)."""
    segments = np.asarray(segments, dtype=float).reshape(-1, 2, 2)
    if not len(segments):
        return
    points = np.concatenate([segments, np.full((len(segments), 1, 2), np.nan)], 1).reshape(-1, 2)  # x0 y0, x1 y1, nan nan, ...
    ax.plot(points[:, 0], points[:, 1], **style)


def _scale_panel(panel: np.ndarray) -> np.ndarray:
    finite = panel[np.isfinite(panel)]
    if not finite.size:
        return panel
    low, high = finite.min(), finite.max()
    return (panel - low) / (high - low) if high > low else panel * 0.0


def _mosaics(pooled: np.ndarray, outlines: Optional[np.ndarray], shape: Tuple[int, int], stride: int, gap: int) -> tuple:
    """``(mosaic, outline mosaic or None)``: the (panels, c, c) ``pooled`` panels, each scaled to [0, 1], laid out in
    ``shape`` (rows, cols) with ``gap`` NaN cells between them (``stride`` = c + gap), and ``outlines`` (panels, c, c)
    as a 0/1 mosaic of the same layout."""
    rows, cols = shape
    size = pooled.shape[-1]
    mosaic = np.full((rows * stride - gap, cols * stride - gap), np.nan)
    outline_mosaic = np.zeros_like(mosaic) if outlines is not None else None
    for index in range(pooled.shape[0]):
        r, c = divmod(index, cols)
        mosaic[r * stride : r * stride + size, c * stride : c * stride + size] = _scale_panel(pooled[index])
        if outline_mosaic is not None:
            outline_mosaic[r * stride : r * stride + size, c * stride : c * stride + size] = np.nan_to_num(outlines[index]) > 0
    return mosaic, outline_mosaic


def _boundary_segments(boundaries: Sequence[int], block: int, panels: int, cols: int, stride: int, size: int) -> list:
    """Lines before each sentence's first token (``boundaries``, in tokens; ``block`` tokens per cell), a column's and a
    row's in every panel of the mosaic, as segments in the mosaic's cell coordinates."""
    edges = [start / block - 0.5 for start in boundaries]
    segments = []
    for index in range(panels):
        r, c = divmod(index, cols)
        x0, y0 = c * stride - 0.5, r * stride - 0.5
        for edge in edges:
            segments.append(((x0 + 0.5 + edge, y0), (x0 + 0.5 + edge, y0 + size)))  # before a new sentence's column
            segments.append(((x0, y0 + 0.5 + edge), (x0 + size, y0 + 0.5 + edge)))  # and row
    return segments


def _token_labels(ax, labels: Sequence[str], block: int, most: int, bottom_row: float) -> None:
    """Token labels of the first panel's rows (left) and the last row's first panel's columns (below ``bottom_row``),
    at most ``most``, as plain texts: matplotlib's tick objects cost several times more to create and draw."""
    positions, names = thin_ticks(labels, block, most)
    for position, name in zip(positions, names):
        name = short_label(name)
        ax.text(-1.0, position, name, fontsize=TOKEN_FONT, ha="right", va="center", clip_on=False)
        ax.text(position, bottom_row + 1.0, name, fontsize=TOKEN_FONT, ha="center", va="top", rotation=90, clip_on=False)


def matrix_grid(
    matrices: np.ndarray,
    titles: Optional[List[str]],
    suptitle: str,
    max_tokens: int,
    labels: Optional[Sequence[str]] = None,
    boundaries: Optional[Sequence[int]] = None,
    outlines: Optional[np.ndarray] = None,
    cmap: str = "magma",
    cols: int = 4,
    row_names: Optional[Sequence[str]] = None,
    col_names: Optional[Sequence[str]] = None,
    panel_inches: float = 2.4,
    max_labels: int = 32,
    block: Optional[int] = None,
):
    """A grid of square heatmaps (e.g. one per head), drawn as one mosaic image in one axes.

    Each panel is scaled to its own range (min -> 0, max -> 1), as heads differ
    in scale; the values themselves are in the run's tables. One image instead
    of one axes per panel, sentence boundaries as one line collection and a
    layout fixed in inches keep drawing fast.

    Args:
        matrices: (panels, T, T).
        titles: one title per panel, written in its corner (or None).
        labels: T token labels, drawn along the left column and bottom row at :data:`TOKEN_FONT`
            points, thinned to what fits a panel (:func:`labels_fitting`, at most ``max_labels``).
        boundaries: token positions where a new sentence starts (white lines before them).
        outlines: (panels, T, T) bool regions to outline in cyan, optional.
        cols: panels per row.
        row_names, col_names: names written beside each row (right) and above each column of panels.
        panel_inches: width of one panel.
        block: None: ``matrices`` are (panels, T, T) and are pooled here (:func:`pool_matrix`); else they
            are already pooled over ``block`` tokens per cell (:meth:`attnsim.findings.examples.Examples.maps`),
            ``labels`` and ``boundaries`` still in tokens, ``outlines`` (panels, c, c) by pooled cell.
    """
    panels = matrices.shape[0]
    cols = min(panels, cols)
    rows = math.ceil(panels / cols)
    prepooled = block is not None
    pooled, block = (matrices, block) if prepooled else pool_matrix(matrices, max_tokens)
    size = pooled.shape[-1]
    gap = max(1, size // 16)
    stride = size + gap
    pooled_outlines = None if outlines is None else outlines.astype(float) if prepooled else pool_matrix(outlines.astype(float), max_tokens)[0]
    mosaic, outline_mosaic = _mosaics(pooled, pooled_outlines, (rows, cols), stride, gap)
    cell = panel_inches / stride  # inches per mosaic cell: the axes is exactly the mosaic
    panels_width = mosaic.shape[1]
    # the colour scale, in the same image: past the row names (if any), a gap, then a strip
    strip_gap, strip_width = max(2, size // 16) + (math.ceil(0.35 / cell) if row_names is not None else 0), max(2, size // 12)
    mosaic = np.concatenate([mosaic, np.full((mosaic.shape[0], strip_gap + strip_width), np.nan)], 1)  # room for the scale
    left = 0.8 if labels is not None else 0.15  # room for TOKEN_CHARS characters of TOKEN_FONT points
    bottom = 0.8 if labels is not None else 0.15
    right = 0.4
    note = f"; cells pooled over {block} tokens" if block > 1 else ""
    heading = wrap_title(f"{suptitle}\n({INDEX_NOTE}{note})", left + mosaic.shape[1] * cell + right)
    top = 0.15 + 0.17 * len(heading) + (0.2 if col_names is not None else 0.0)
    fig, ax = inch_axes(mosaic.shape[1] * cell, mosaic.shape[0] * cell, left, right, bottom, top)
    ax.imshow(mosaic, cmap=cmap, interpolation="nearest", vmin=0, vmax=1, aspect="auto")
    scale_strip(ax, mosaic.shape[1] - 0.5 - strip_width, mosaic.shape[1] - 0.5, mosaic.shape[0], cmap, "scaled within each panel (min to max)")
    ax.spines[:].set_visible(False)
    if outline_mosaic is not None and outline_mosaic.any():
        draw_segments(ax, mask_edges(outline_mosaic > 0), color="cyan", linewidth=0.6)
    for index in range(panels if titles is not None else 0):
        r, c = divmod(index, cols)
        ax.text(c * stride + 1, r * stride + 1, titles[index], color="white", fontsize=8, va="top", ha="left")
    for r, name in enumerate(row_names or ()):
        ax.text(panels_width + 1, r * stride + size / 2, name, fontsize=8, va="center", ha="left")
    for c, name in enumerate(col_names or ()):
        ax.text(c * stride + size / 2, -1.5, name, fontsize=8, va="bottom", ha="center", clip_on=False)
    if boundaries:
        draw_segments(ax, _boundary_segments(boundaries, block, panels, cols, stride, size), color="white", linewidth=0.4, alpha=0.7)
    ax.set_xlim(-0.5, mosaic.shape[1] - 0.5)
    ax.set_ylim(mosaic.shape[0] - 0.5, -0.5)
    ax.set(xticks=[], yticks=[])
    if labels is not None:
        _token_labels(ax, labels, block, labels_fitting(panel_inches, max_labels), (rows - 1) * stride + size - 0.5)
    fig.text(0.5, 1 - 0.08 / fig.get_size_inches()[1], "\n".join(heading), fontsize=9, ha="center", va="top")
    return fig


def sentence_starts(sentence_ids: Sequence[int]) -> List[int]:
    """Positions where the sentence id changes to a new non-negative id."""
    starts, previous = [], None
    for position, sid in enumerate(sentence_ids):
        if sid >= 0 and previous is not None and sid != previous:
            starts.append(position)
        if sid >= 0:
            previous = sid
    return starts
