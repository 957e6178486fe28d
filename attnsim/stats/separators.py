"""Attention to separator tokens, attention entropy and distance, per layer and head.

Source: Clark, Khandelwal, Levy, Manning, "What Does BERT Look At? An Analysis
of BERT's Attention", BlackboxNLP 2019 (Sec. 3: attention to [CLS], [SEP],
"." and ","; Sec. 3.3 attention entropy; mean attention distance).

For layer l, head h and one window with attention probabilities A
(query_pos x key_pos), *queries* are the tokens that enter statistics (real
tokens; special tokens unless ``stats.include_special=false``) and *keys* all
real tokens (what the model attends to; padding never). Each quantity is
computed per query and averaged over every query of the corpus:

- ``attention_<category>``: attention mass ``sum_j A[i, j]`` over the keys j
  whose token id belongs to the category (``cls``, ``sep``, ``period``,
  ``comma``, ``newline``: ids given by the finding from the tokenizer).
  ``cls`` is the *first token*: the key at position 0 (BERT's [CLS],
  RoBERTa's ``<s>``, a decoder's BOS, or the first text token of a decoder
  whose tokenizer adds no BOS, e.g. GPT-2: the "attention sink" of decoder
  language models) and any other token with a ``cls`` id (the tokenizer's
  [CLS], else BOS).
- ``attention_separators``: mass on the union of the first four categories
  (``newline`` is reported on its own and kept out of the union, so the union
  means the same as in earlier runs); ``attention_separators_chance``: the
  same for uniform attention over the keys the query can see (the share of
  those keys that are separators).
- ``attention_entropy``: ``-sum_j A[i, j] log A[i, j]`` over keys, in nats,
  with 0 log 0 = 0; ``attention_entropy_chance``: log(number of keys the
  query can see), the entropy of uniform attention (the maximum).
- ``attention_distance``: ``sum_j A[i, j] |i - j|`` (tokens);
  ``attention_distance_chance``: the same for uniform attention over the keys
  the query can see.

The keys a query *can see* are every real token, or for a causal (decoder)
model (``causal=True``) the real tokens at or before the query: query i of a
decoder attends to i + 1 keys, so its uniform-attention chance levels are
those of i + 1 keys, not of the whole window.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.distance import bin_profile, distance_bins
from attnsim.stats.pairs import ChunkReducer, PairView, Piece

CATEGORIES = ("cls", "sep", "period", "comma")  # attention_separators is the mass on their union
EXTRA_CATEGORIES = ("newline",)  # reported on their own, outside the union
FIRST_TOKEN = "cls"  # the category that holds the key at position 0 (the first token)

# Smallest normal float32. Attention probabilities are clamped to it before the log of the entropy:
# log(0) and logs of subnormals take a slow path on x86 (several times the cost of a normal log),
# and p * log(max(p, tiny)) differs from p * log(p) by less than 1e-36 for p below it.
TINY = torch.finfo(torch.float32).tiny


def scalar_names(categories: Sequence[str] = CATEGORIES) -> tuple:
    """Names of the statistics :class:`SeparatorAccumulator` computes for ``categories``."""
    return tuple(f"attention_{c}" for c in categories) + (
        "attention_separators",
        "attention_separators_chance",
        "attention_entropy",
        "attention_entropy_chance",
        "attention_distance",
        "attention_distance_chance",
    )


def key_categories(
    input_ids: torch.Tensor, keys: torch.Tensor, category_ids: Sequence[Sequence[int]], first: Optional[int] = None, union: Optional[int] = None
) -> torch.Tensor:
    """0/1 membership of each key in each category, and in the union of the first ``union`` (last column).

    Args:
        input_ids: (batch, pos) token ids.
        keys: (batch, pos) float 0/1, real key tokens.
        category_ids: C lists of token ids.
        first: index of the category that also holds the key at position 0 (the first token); None: none.
        union: how many leading categories form the union; None: all C.

    Returns:
        (batch, pos, C + 1) float32.
    """
    columns = [torch.isin(input_ids, torch.as_tensor(list(ids), dtype=input_ids.dtype, device=input_ids.device)).float() for ids in category_ids]
    if first is not None:
        columns[first] = columns[first].clone()
        columns[first][:, 0] = 1.0
    member = torch.stack(columns, -1) * keys[..., None]  # (B, T, C)
    return torch.cat([member, member[..., : len(columns) if union is None else union].amax(-1, keepdim=True)], -1)


def visible_keys(keys: torch.Tensor, causal: bool) -> torch.Tensor:
    """(batch, query_pos, key_pos) float 0/1: the keys each query can see (module docstring).

    Args:
        keys: (batch, pos) float 0/1 real tokens.
        causal: keys at or before the query only (decoder models).
    """
    seen = keys[:, None, :].expand(-1, keys.shape[-1], -1)
    if causal:
        seen = torch.tril(seen)
    return seen


class SeparatorSums(ChunkReducer):
    """Per-window attention sums of the separator statistics, folded piece by piece in the view's attention walk
    (Clark et al. 2019, "What does BERT look at?": attention to [CLS], [SEP] and punctuation, entropy, distance).

    Queries are the tokens that enter statistics, keys every real token (see the module docstring). Written once
    for every path: a dense piece holds every query row of a chunk of windows, a blockwise piece one block of rows
    of one window and layer; every sum below is a sum over rows.

    Attributes:
        key_mass: (batch, layer, head, T) float32 attention each key receives, summed over the queries:
            ``sum_i query[i] A[i, j]``.
        distance: (batch, layer, head) float32 ``sum_i sum_j A[i, j] |i - j|`` over queries i and keys j (tokens).
        entropy: (batch, layer, head) float32 ``-sum_i sum_j A[i, j] ln A[i, j]`` over queries i and keys j
            (nats; 0 ln 0 = 0: probabilities are clamped to :data:`TINY` inside the log).

    Raises:
        ValueError: the batch was captured without attention probabilities.
    """

    source = "attention"

    def __init__(self, view: PairView) -> None:
        lead = (view.batch_size, view.n_layers, view.n_heads)
        self.key_mass = torch.zeros(*lead, view.seq_len, device=view.device)
        self.distance = torch.zeros(lead, device=view.device)
        self.entropy = torch.zeros(lead, device=view.device)
        self.queries = view.tokens.float()  # (B, T)
        self.keys = view.batch["attention_mask"].float()  # (B, T)
        self.whole = ((self.queries > 0) & (self.keys > 0)).all(-1).tolist()  # per window: every position a query and a key
        position = torch.arange(view.seq_len, device=view.device, dtype=torch.float32)
        self.gap = (position[:, None] - position[None, :]).abs()  # (T, T) |i - j|

    def update(self, view: PairView, piece: Piece) -> None:
        windows, layers, values = piece.windows, piece.layers, piece.values  # values (c, l, H, rows, K)
        (r0, r1), keys = piece.rows, piece.keys
        q = self.queries[windows, r0:r1]  # (c, rows)
        self.key_mass[windows, layers, :, :keys] += (q[:, None, None, None, :] @ values)[..., 0, :]  # sum_i q_i A[i, j]
        query_key = q[:, :, None] * self.keys[windows, None, :keys]  # (c, rows, K): statistic query i, real key j
        # summed by torch's cascade sum, not a float32 matrix-vector product: BLAS accumulates the T x T cells
        # one after the other (4e-5 relative error at T = 256, growing with T), the cascade sum stays near 1e-7
        self.distance[windows, layers] += (values * (query_key * self.gap[r0:r1, :keys])[:, None, None]).sum((-1, -2))
        # the entropy's log is the costliest step: only the span of real tokens is taken (outside it
        # every query or key weight is 0)
        first, last = view.real_span(piece.start, piece.stop)
        top, bottom, right = max(first, r0), min(last, r1), min(last, keys)
        if bottom > top and right > first:
            span = values[..., top - r0 : bottom - r0, first:right]  # (c, l, H, n, m)
            plogp = span.clamp_min(TINY).log_().mul_(span)
            if not all(self.whole[windows]):  # some position is not a query or key: weigh each cell
                plogp = plogp * query_key[:, None, None, top - r0 : bottom - r0, first:right]
            self.entropy[windows, layers] -= plogp.sum((-1, -2))  # else every weight is 1: no product


def _separator_update(
    key_mass: torch.Tensor,
    entropy_sums: torch.Tensor,
    distance_sums: torch.Tensor,
    input_ids: torch.Tensor,
    keys: torch.Tensor,
    queries: torch.Tensor,
    category_ids: Sequence[Sequence[int]],
    first: Optional[int] = None,
    union: Optional[int] = None,
    causal: bool = False,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`SeparatorAccumulator` states.

    Args:
        key_mass: (L, B, H, T) attention each key receives, summed over the statistic queries.
        entropy_sums, distance_sums: (L, B, H) attention entropy (nats) and distance (tokens) summed over queries.
        input_ids: (B, T) token ids.
        keys: (B, T) float 0/1 real key tokens; queries: (B, T) float 0/1 tokens that enter statistics.
        category_ids: C lists of token ids; first, union: see :func:`key_categories`.
        causal: a query sees only the keys at or before it (chance levels, module docstring).

    Returns:
        State name -> float64 increment.
    """
    member = key_categories(input_ids, keys, category_ids, first, union)  # (B, T, C+1)
    # mass on a category = the attention each key receives from the queries, summed over its keys
    mass = torch.einsum("lbhj,bjc->lbhc", key_mass, member)  # (L, B, H, C+1)
    seq_len = keys.shape[-1]
    position = torch.arange(seq_len, device=keys.device, dtype=keys.dtype)
    gap = (position[:, None] - position[None, :]).abs()  # (T, T) |i - j|
    seen = visible_keys(keys, causal)  # (B, T, T) the keys each query can see
    n_keys = seen.sum(-1)  # (B, T)
    distance_chance = safe_divide((seen * gap).sum(-1), n_keys).nan_to_num(0.0)  # (B, T): mean |i - j| over visible keys
    separators_chance = safe_divide(seen @ member[..., -1:], n_keys[..., None])[..., 0].nan_to_num(0.0)  # (B, T)
    return {
        "mass_sum": mass.double().sum(1),
        "entropy_sum": entropy_sums.double().sum(1),
        "distance_sum": distance_sums.double().sum(1),
        "queries": queries.sum().double(),
        "separators_chance_sum": (queries * separators_chance).sum().double(),
        "entropy_chance_sum": (queries * torch.log(n_keys.clamp_min(1.0))).sum().double(),
        "distance_chance_sum": (queries * distance_chance).sum().double(),
    }


def _separator_compute(state: Mapping[str, torch.Tensor], categories: Sequence[str]) -> Dict[str, torch.Tensor]:
    """Scalars (see :func:`scalar_names`) from the :class:`SeparatorAccumulator` states, each (layer, head) float64; NaN without queries."""
    shape = state["entropy_sum"].shape
    queries = state["queries"].expand(shape)
    out = {f"attention_{c}": safe_divide(state["mass_sum"][..., i], queries) for i, c in enumerate(categories)}
    out["attention_separators"] = safe_divide(state["mass_sum"][..., -1], queries)
    out["attention_separators_chance"] = safe_divide(state["separators_chance_sum"].expand(shape), queries)
    out["attention_entropy"] = safe_divide(state["entropy_sum"], queries)
    out["attention_entropy_chance"] = safe_divide(state["entropy_chance_sum"].expand(shape), queries)
    out["attention_distance"] = safe_divide(state["distance_sum"], queries)
    out["attention_distance_chance"] = safe_divide(state["distance_chance_sum"].expand(shape), queries)
    return out


class SeparatorAccumulator(Accumulator):
    """Streaming attention mass on separator tokens, entropy and distance per layer and head.

    Args:
        n_layers, n_heads: model shape.
        category_ids: category name -> token ids (e.g. ``{"cls": [101], "sep": [102], ...}``); the ``cls``
            category also holds the first token (position 0); ``attention_separators`` is the mass on the
            union of the names in :data:`CATEGORIES` (all of them when none is).
        causal: the model is a decoder: chance levels use the keys at or before each query.

    States (float64 sums): attention mass per category and on their union
    (L, H, C + 1), entropy and distance (L, H), summed over queries; the
    number of queries and the uniform-attention (chance) sums ().
    """

    reducers = (SeparatorSums,)

    def __init__(self, n_layers: int, n_heads: int, category_ids: Dict[str, Sequence[int]], causal: bool = False, seq_len: Optional[int] = None):
        super().__init__()
        self.seq_len = seq_len
        # the union's categories first, extra ones after
        self.categories = tuple([c for c in category_ids if c in CATEGORIES] + [c for c in category_ids if c not in CATEGORIES])
        self.category_ids = [tuple(int(i) for i in category_ids[c]) for c in self.categories]
        self.union = sum(c in CATEGORIES for c in self.categories) or len(self.categories)
        self.first = self.categories.index(FIRST_TOKEN) if FIRST_TOKEN in self.categories else None
        self.causal = bool(causal)
        self.add_sum("mass_sum", n_layers, n_heads, len(self.categories) + 1)
        self.add_sum("entropy_sum", n_layers, n_heads)
        self.add_sum("distance_sum", n_layers, n_heads)
        self.add_sum("queries")
        self.add_sum("separators_chance_sum")
        self.add_sum("entropy_chance_sum")
        self.add_sum("distance_chance_sum")
        if seq_len is not None:  # attention by absolute position: mass each key position receives, and uniform attention's
            self.add_sum("position_mass", n_layers, n_heads, seq_len)
            self.add_sum("position_chance", seq_len)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        if not view.has_attention:
            raise ValueError("The separators statistics need attention probabilities; the finding must set needs_attention = True.")
        sums = view.reduced(SeparatorSums)
        key_mass = sums.key_mass.transpose(0, 1)  # (L, B, H, T)
        entropy = sums.entropy.transpose(0, 1)  # (L, B, H)
        distance = sums.distance.transpose(0, 1)  # (L, B, H)
        self.fold(
            _separator_update(
                key_mass,
                entropy,
                distance,
                view.batch["input_ids"],
                view.batch["attention_mask"].float(),
                view.tokens.float(),
                self.category_ids,
                self.first,
                self.union,
                self.causal,
            )
        )
        if self.seq_len is not None:
            keys = view.batch["attention_mask"].double()  # (B, T) real keys
            queries = view.tokens.double()  # (B, T) queries that enter statistics
            if self.causal:  # uniform attention over the keys a query can see: query i gives 1 / (real keys 0..i) to each
                share = safe_divide(queries, keys.cumsum(-1)).nan_to_num(0.0)  # (B, T) per query
                chance = (keys * share.flip(-1).cumsum(-1).flip(-1)).sum(0)  # key j receives from every query i >= j
            else:  # each query gives 1 / n_keys to every real key
                chance = (queries.sum(-1)[:, None] * safe_divide(keys, keys.sum(-1, keepdim=True).expand_as(keys)).nan_to_num(0.0)).sum(0)
            self.fold({"position_mass": key_mass.double().sum(1), "position_chance": chance})

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars (see :func:`scalar_names`), each (layer, head) float64; NaN without queries. With ``seq_len``, also
        ``position_mass`` (layer, head, K): the attention mass the key positions of each position bin receive, per
        query (bins of :func:`~attnsim.stats.distance.distance_bins`: one per position up to 512, logarithmic beyond),
        ``position_mass_chance`` (layer, head, K) the same under uniform attention over the real keys, and
        ``position_bins`` (K,) the bins' first positions."""
        state = dict(self.metric_state)
        out = _separator_compute({k: v for k, v in state.items() if not k.startswith("position_")}, self.categories)
        if self.seq_len is not None:
            edges = distance_bins(self.seq_len)
            queries = state["queries"]
            mass = safe_divide(bin_profile(state["position_mass"], edges), queries.expand(*state["position_mass"].shape[:-1], len(edges)))
            chance = safe_divide(bin_profile(state["position_chance"], edges), queries.expand(len(edges)))
            out["position_mass"], out["position_mass_chance"] = mass, chance.expand_as(mass)
            out["position_bins"] = edges
        return out
