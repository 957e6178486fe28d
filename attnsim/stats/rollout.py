"""Attention rollout and attention flow (Abnar & Zuidema 2020), as pure tensor functions.

Source: S. Abnar and W. Zuidema, "Quantifying Attention Flow in Transformers",
ACL 2020, Sec. 3 (arXiv:2005.00928).

Shapes use one vocabulary: ``layer``, ``batch``, ``head``, ``query_pos``
(rows: the token that attends), ``key_pos`` (columns: the token attended to).
Every function treats each item of a batch alike (no reduction over the batch),
and padding never carries mass: ``valid`` (batch, pos) marks real tokens.

Rollout of one input, layer by layer (l = 0 .. L-1, 0 is the first layer):

1. *Head fusion*: ``A_l = fuse_h(attention[l, h])`` with ``mean`` (the paper),
   ``max`` or ``min`` over heads, elementwise.
2. *Discard* (optional, ``discard_ratio`` r in [0, 1)): in every row i of
   ``A_l`` the ``floor(r * n_i)`` smallest weights are set to 0, where n_i is
   the number of *candidate* entries of row i: valid keys that are not kept
   tokens. Kept tokens (``keep``; by default the [CLS] token at position 0)
   are never discarded: neither their column (attention paid to [CLS]) nor
   their row ([CLS] attending to the input) is touched. Ties are broken by key
   position (the earlier key is discarded first). This is the noise filter of
   the common implementation (lowest weights dropped, [CLS] kept) taken per
   row, so that every row of every item is filtered alike.
3. *Residual*: ``Â_l = (A_l + I) / 2`` over valid tokens, then every row is
   renormalised to sum to 1 (the identity stands for the residual connection;
   renormalising matters after ``max`` fusion or a discard). Padding rows
   become the identity row; padding columns are 0.
4. *Rollout*: ``R_0 = Â_0`` and ``R_l = Â_l R_{l-1}``; ``R_l[i, j]`` is how
   much of token i's representation after layer l comes from input token j.
   Rows of ``R_l`` sum to 1.

Causal (decoder) models: their attention is lower-triangular (``A[i, j] = 0``
for j > i). Fusion, the discard, ``(A + I) / 2`` with renormalised rows and
products of lower-triangular matrices all stay lower-triangular, so
``R_l[i, j] = 0`` for j > i and every row still sums to 1: token i mixes only
tokens 0..i. Only the *last* token's row covers the whole window, so that is
the readout row of a causal model (the [CLS] row of an encoder).

Attention flow treats the same ``Â_l`` as capacities of a layered graph and
computes max-flow values (see :func:`attention_flow`).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide

FUSIONS = ("mean", "max", "min")


def fuse_heads(attention: torch.Tensor, fusion: str = "mean") -> torch.Tensor:
    """Fuse the heads of attention probabilities.

    Args:
        attention: (..., head, query_pos, key_pos) attention probabilities.
        fusion: ``mean`` (Abnar & Zuidema 2020), ``max`` or ``min`` over heads, elementwise.

    Returns:
        (..., query_pos, key_pos), same dtype.

    Raises:
        ValueError: unknown ``fusion``.
    """
    if fusion == "mean":
        return attention.mean(-3)
    if fusion == "max":
        return attention.amax(-3)
    if fusion == "min":
        return attention.amin(-3)
    raise ValueError(f"head fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}")


def _pair_mask(valid: Optional[torch.Tensor], attention: torch.Tensor) -> torch.Tensor:
    """(batch, query_pos, key_pos) bool: both tokens valid (all True when ``valid`` is None)."""
    if valid is None:
        return torch.ones(attention.shape[-2:], dtype=torch.bool, device=attention.device)
    valid = valid.bool()
    return valid[..., :, None] & valid[..., None, :]


def discard_lowest(attention: torch.Tensor, ratio: float, valid: Optional[torch.Tensor] = None, keep: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Set each row's ``floor(ratio * n)`` smallest candidate weights to 0 (module docstring, step 2).

    Args:
        attention: (..., batch, query_pos, key_pos) fused attention, e.g. (layer, batch, T, T).
        ratio: share of candidate entries discarded per row, in [0, 1).
        valid: (batch, pos) bool real tokens; None: all tokens real.
        keep: (batch, pos) bool tokens never discarded, neither row nor column; None: position 0 ([CLS]).

    Returns:
        A copy of ``attention`` with the discarded entries set to 0 (rows not renormalised).

    Raises:
        ValueError: ``ratio`` outside [0, 1).
    """
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), not {ratio}")
    if ratio == 0.0:
        return attention.clone()
    size = attention.shape[-1]
    if keep is None:
        keep = torch.zeros(attention.shape[-3] if attention.dim() >= 3 else 1, size, dtype=torch.bool, device=attention.device)
        keep[:, 0] = True
    keep = keep.bool()
    pairs = _pair_mask(valid, attention)  # (batch, T, T) or (T, T)
    candidate = pairs & ~keep[..., None, :] & ~keep[..., :, None]  # kept rows and columns are never candidates
    candidate = candidate.expand(attention.shape)
    n = candidate.sum(-1, keepdim=True)  # (..., T, 1)
    k = torch.floor(ratio * n.to(torch.float64) + 1e-9).long()
    # rank candidates by weight within their row; non-candidates sort last
    ranked = attention.masked_fill(~candidate, float("inf"))
    order = ranked.sort(dim=-1, stable=True).indices  # ascending weight, earlier key first on ties
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(size, device=attention.device).expand_as(order))
    drop = candidate & (rank < k)
    return attention.masked_fill(drop, 0.0)


def add_residual(attention: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``Â = (A + I) / 2`` over valid tokens with rows renormalised to sum to 1 (module docstring, step 3).

    Args:
        attention: (..., batch, query_pos, key_pos) fused attention weights (>= 0).
        valid: (batch, pos) bool real tokens; None: all real.

    Returns:
        Same shape; every row sums to 1 (a padding row is its identity row).
    """
    size = attention.shape[-1]
    masked = attention * _pair_mask(valid, attention).to(attention.dtype)
    eye = torch.eye(size, dtype=attention.dtype, device=attention.device)
    residual = (masked + eye) / 2
    return residual / residual.sum(-1, keepdim=True)  # row sums >= 1/2: never a division by 0


def residual_attention(
    attention: torch.Tensor, valid: Optional[torch.Tensor] = None, fusion: str = "mean", discard_ratio: float = 0.0, keep: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Per-layer matrices ``Â_l`` of rollout and flow: fuse heads, discard, add the residual, renormalise.

    Args:
        attention: (layer, batch, head, query_pos, key_pos) attention probabilities of a model in eval mode.
        valid, keep: (batch, pos) bool, see :func:`discard_lowest`.
        fusion: ``mean`` | ``max`` | ``min``.
        discard_ratio: in [0, 1).

    Returns:
        (layer, batch, query_pos, key_pos), rows summing to 1.
    """
    fused = fuse_heads(attention, fusion)
    if discard_ratio > 0:
        fused = discard_lowest(fused, discard_ratio, valid, keep)
    return add_residual(fused, valid)


def attention_rollout(
    attention: torch.Tensor, valid: Optional[torch.Tensor] = None, fusion: str = "mean", discard_ratio: float = 0.0, keep: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Attention rollout after every layer (Abnar & Zuidema 2020, Eq. 1; module docstring).

    Args:
        attention: (layer, batch, head, query_pos, key_pos) attention probabilities (eval mode, no dropout).
        valid: (batch, pos) bool real tokens (padding masked out); None: all real.
        fusion: ``mean`` | ``max`` | ``min`` over heads.
        discard_ratio: share of each row's lowest weights dropped before the residual, in [0, 1).
        keep: (batch, pos) bool tokens never discarded; None: position 0 ([CLS]).

    Returns:
        (layer, batch, query_pos, key_pos): ``R_l = Â_l ... Â_0``; entry [l, b, i, j] is the share of
        token i after layer l that comes from input token j (unitless, rows sum to 1).

    Raises:
        ValueError: unknown fusion or ``discard_ratio`` outside [0, 1).
    """
    layers = residual_attention(attention, valid, fusion, discard_ratio, keep)
    out = []
    current = layers[0]
    out.append(current)
    for layer in range(1, layers.shape[0]):
        current = layers[layer] @ current  # (B, T, T) @ (B, T, T)
        out.append(current)
    return torch.stack(out)


def attention_flow(residual: torch.Tensor, sources: Optional[Sequence[int]] = None, resolution: float = 1e-9) -> torch.Tensor:
    """Attention flow of one input: max-flow values in the layered attention graph (Abnar & Zuidema 2020, Sec. 3).

    Graph: a node ``(l, i)`` for every layer boundary l = 0..L (0: the input
    embeddings) and token i. For layer l (0-indexed) an edge runs from
    ``(l + 1, i)`` to ``(l, j)`` with capacity ``Â_l[i, j]``. The flow of
    output token s to input token j is the value of a maximum flow from
    ``(L, s)`` to ``(0, j)``, computed by networkx's ``maximum_flow_value``
    (shortest augmenting paths, one residual network reused) on capacities rounded to integer multiples of
    ``resolution`` (the max-flow algorithms are exact on integers). Each
    value is at most 1, but a row does not sum to 1: every (s, j) is its own
    flow problem. Cost grows with L·T² edges and T max-flow runs per source,
    so it is meant for short inputs.

    Args:
        residual: (layer, pos, pos) matrices ``Â_l`` of one input (:func:`residual_attention`), restricted
            to its real tokens (no padding).
        sources: output tokens whose flow is computed; None: every token.
        resolution: capacity quantum (unitless attention weight).

    Returns:
        (len(sources), pos) float64: flow from each source token at the top to every input token.

    Raises:
        ValueError: ``residual`` is not (layer, pos, pos).
    """
    import networkx as nx
    from networkx.algorithms.flow import build_residual_network, shortest_augmenting_path

    if residual.dim() != 3 or residual.shape[-1] != residual.shape[-2]:
        raise ValueError(f"residual must be (layer, pos, pos), got {tuple(residual.shape)}")
    n_layers, size, _ = residual.shape
    scale = 1.0 / resolution
    weights = torch.round(residual.detach().double().cpu() * scale).long().tolist()
    graph = nx.DiGraph()
    for layer in range(n_layers):
        for i in range(size):
            row = weights[layer][i]
            for j in range(size):
                if row[j] > 0:
                    graph.add_edge((layer + 1, i), (layer, j), capacity=row[j])
    sources = list(range(size)) if sources is None else [int(s) for s in sources]
    flow = torch.zeros(len(sources), size, dtype=torch.float64)
    # one residual network serves every (source, sink) problem: networkx resets it per call
    residual_network = build_residual_network(graph, "capacity")
    for row, source in enumerate(sources):
        for sink in range(size):
            if (n_layers, source) in graph and (0, sink) in graph:
                value = nx.maximum_flow_value(graph, (n_layers, source), (0, sink), flow_func=shortest_augmenting_path, residual=residual_network)
                flow[row, sink] = value / scale
    return flow


class RolloutAccumulator(Accumulator):
    """Corpus-level rollout summaries per layer depth (heads are fused, so there is one value per layer).

    For depth l (rollout through layers 0..l), over every window:

    - ``<category>_mass``: mean over windows and valid query tokens i of the rollout mass
      ``sum_{j in category} R_l[i, j]`` (share in [0, 1]); ``<category>_mass_chance``: the same
      for uniform mixing, ``n_category / n_valid``.
    - ``self_mass``: mean ``R_l[i, i]``, how much of a token stays its own.
    - ``readout_entropy``: entropy (nats, 0 log 0 = 0) of the readout row ``R_l[r, :]`` of the
      readout token r (the [CLS] token; for a causal model the last real token), mean over windows.
    - ``readout_mean`` (extra): (layer, pos) mean readout row by position.

    Args:
        n_layers: model layers.
        seq_len: window length T.
        categories: category names (keys of the masks given to :meth:`update`).

    States (float64 sums): per category mass and chance (L, C), self mass (L,), entropy (L,),
    valid rows (), windows (), readout row sums (L, T) and counts (T,).
    """

    def __init__(self, n_layers: int, seq_len: int, categories: Sequence[str]):
        super().__init__()
        self.categories = tuple(categories)
        self.add_sum("mass_sum", n_layers, len(self.categories))
        self.add_sum("chance_sum", n_layers, len(self.categories))
        self.add_sum("self_sum", n_layers)
        self.add_sum("entropy_sum", n_layers)
        self.add_sum("rows")
        self.add_sum("windows")
        self.add_sum("readout_sum", n_layers, seq_len)
        self.add_sum("readout_count", seq_len)

    def update(self, rollout: torch.Tensor, valid: torch.Tensor, categories: Dict[str, torch.Tensor], readout: torch.Tensor) -> None:  # type: ignore[override]
        """Fold one batch in.

        Args:
            rollout: (layer, batch, T, T) from :func:`attention_rollout`.
            valid: (batch, T) bool real tokens.
            categories: name -> (batch, T) bool, one per name given at construction.
            readout: (batch,) int64 position of each window's readout token.
        """
        rollout = rollout.double()
        weight = valid.double()  # (B, T)
        n_valid = weight.sum(-1)  # (B,)
        for c, name in enumerate(self.categories):
            mask = categories[name].double() * weight  # (B, T)
            mass = (rollout * mask[None, :, None, :]).sum(-1)  # (L, B, T)
            self.mass_sum[:, c] += (mass * weight[None]).sum((1, 2))
            # uniform mixing: each of a window's n valid rows puts n_c / n on the category
            self.chance_sum[:, c] += mask.sum()
        self.self_sum += (rollout.diagonal(dim1=-2, dim2=-1) * weight[None]).sum((1, 2))
        self.rows += n_valid.sum()
        self.windows += float(valid.shape[0])
        batch = torch.arange(valid.shape[0], device=valid.device)
        rows = rollout[:, batch, readout]  # (L, B, T)
        logs = torch.where(rows > 0, rows.log(), torch.zeros_like(rows))
        self.entropy_sum += -(rows * logs).sum((1, 2))
        self.readout_sum += (rows * weight[None]).sum(1)
        self.readout_count += weight.sum(0)

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars (layer, 1) by the names in the class docstring, and ``readout_mean`` (layer, T)."""
        out: Dict[str, torch.Tensor] = {}
        for c, name in enumerate(self.categories):
            out[f"{name}_mass"] = safe_divide(self.mass_sum[:, c], self.rows)[:, None]
            out[f"{name}_mass_chance"] = safe_divide(self.chance_sum[:, c], self.rows)[:, None]
        out["self_mass"] = safe_divide(self.self_sum, self.rows)[:, None]
        out["readout_entropy"] = safe_divide(self.entropy_sum, self.windows)[:, None]
        out["readout_mean"] = safe_divide(self.readout_sum, self.readout_count)
        return out


__all__ = [
    "FUSIONS",
    "fuse_heads",
    "discard_lowest",
    "add_residual",
    "residual_attention",
    "attention_rollout",
    "attention_flow",
    "RolloutAccumulator",
]
