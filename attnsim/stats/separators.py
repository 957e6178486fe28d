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
  ``comma``: ids given by the finding from the tokenizer).
- ``attention_separators``: mass on the union of the categories;
  ``attention_separators_chance``: the same for uniform attention over the
  window's keys (the share of keys that are separators).
- ``attention_entropy``: ``-sum_j A[i, j] log A[i, j]`` over keys, in nats,
  with 0 log 0 = 0; ``attention_entropy_chance``: log(number of keys), the
  entropy of uniform attention (the maximum).
- ``attention_distance``: ``sum_j A[i, j] |i - j|`` (tokens);
  ``attention_distance_chance``: the same for uniform attention over keys.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.distance import bin_profile, distance_bins
from attnsim.stats.pairs import ChunkReducer, PairView

CATEGORIES = ("cls", "sep", "period", "comma")

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


def key_categories(input_ids: torch.Tensor, keys: torch.Tensor, category_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """0/1 membership of each key in each category, and in their union (last column).

    Args:
        input_ids: (batch, pos) token ids.
        keys: (batch, pos) float 0/1, real key tokens.
        category_ids: C lists of token ids.

    Returns:
        (batch, pos, C + 1) float32.
    """
    columns = [torch.isin(input_ids, torch.as_tensor(list(ids), dtype=input_ids.dtype, device=input_ids.device)).float() for ids in category_ids]
    member = torch.stack(columns, -1) * keys[..., None]  # (B, T, C)
    return torch.cat([member, member.amax(-1, keepdim=True)], -1)


class SeparatorSums(ChunkReducer):
    """Per-window attention sums of the separator statistics, folded in the view's attention walk.

    Queries are the tokens that enter statistics, keys every real token (see the module docstring).

    Attributes:
        key_mass: (batch, layer * head, T) float32 attention each key receives, summed over the queries:
            ``sum_i query[i] A[i, j]``.
        distance: (batch, layer * head) float32 ``sum_i sum_j A[i, j] |i - j|`` over queries i and keys j (tokens).
        entropy: (batch, layer * head) float32 ``-sum_i sum_j A[i, j] ln A[i, j]`` over queries i and keys j
            (nats; 0 ln 0 = 0: probabilities are clamped to :data:`TINY` inside the log).

    Raises:
        ValueError: the batch was captured without attention probabilities.
    """

    source = "attention"

    def __init__(self, view: PairView) -> None:
        heads = view.n_layers * view.n_heads
        self.key_mass = torch.empty(view.batch_size, heads, view.seq_len, device=view.device)
        self.distance = torch.empty(view.batch_size, heads, device=view.device)
        self.entropy = torch.zeros(view.batch_size, heads, device=view.device)
        self.queries = view.tokens.float()  # (B, T)
        self.keys = view.batch["attention_mask"].float()  # (B, T)
        position = torch.arange(view.seq_len, device=view.device, dtype=torch.float32)
        self.gap = (position[:, None] - position[None, :]).abs()  # (T, T) |i - j|

    def update(self, view: PairView, start: int, stop: int, chunk: torch.Tensor) -> None:
        count, heads, seq_len = stop - start, chunk.shape[1], view.seq_len
        q, k = self.queries[start:stop], self.keys[start:stop]
        self.key_mass[start:stop] = (q[:, None, None, :] @ chunk)[..., 0, :]  # (c, L*H, T): sum_i q_i A[i, j]
        query_key = q[:, :, None] * k[:, None, :]  # (c, T, T): statistic query i, real key j
        cells = chunk.view(count, heads, seq_len * seq_len)  # query-major cells i * T + j
        # summed by torch's cascade sum, not a float32 matrix-vector product: BLAS accumulates the T x T cells
        # one after the other (4e-5 relative error at T = 256, growing with T), the cascade sum stays near 1e-7
        self.distance[start:stop] = (cells * (query_key * self.gap).reshape(count, 1, -1)).sum(-1)
        # the entropy's log is the costliest step: only the span of real tokens is taken (outside it
        # every query or key weight is 0)
        first, last = view.real_span(start, stop)
        if last > first:
            span = chunk[..., first:last, first:last]  # (c, L*H, n, n)
            plogp = span.clamp_min(TINY).log_().mul_(span)
            weight = query_key[:, first:last, first:last].reshape(count, -1, 1)
            self.entropy[start:stop] = -(plogp.reshape(count, heads, -1) * weight.reshape(count, 1, -1)).sum(-1)

    @classmethod
    def from_blocks(cls, view: PairView) -> "SeparatorSums":
        """The blockwise view's counterpart: the same sums from its recomputed attention blocks."""
        walked = view.walk("attention")
        out = cls.__new__(cls)
        out.key_mass, out.distance, out.entropy = walked["key_mass"], walked["distance"], walked["entropy"]
        return out


def _separator_update(
    key_mass: torch.Tensor,
    entropy_sums: torch.Tensor,
    distance_sums: torch.Tensor,
    input_ids: torch.Tensor,
    keys: torch.Tensor,
    queries: torch.Tensor,
    category_ids: Sequence[Sequence[int]],
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`SeparatorAccumulator` states.

    Args:
        key_mass: (L, B, H, T) attention each key receives, summed over the statistic queries.
        entropy_sums, distance_sums: (L, B, H) attention entropy (nats) and distance (tokens) summed over queries.
        input_ids: (B, T) token ids.
        keys: (B, T) float 0/1 real key tokens; queries: (B, T) float 0/1 tokens that enter statistics.
        category_ids: C lists of token ids.

    Returns:
        State name -> float64 increment.
    """
    member = key_categories(input_ids, keys, category_ids)  # (B, T, C+1)
    # mass on a category = the attention each key receives from the queries, summed over its keys
    mass = torch.einsum("lbhj,bjc->lbhc", key_mass, member)  # (L, B, H, C+1)
    seq_len = keys.shape[-1]
    position = torch.arange(seq_len, device=keys.device, dtype=keys.dtype)
    gap = (position[:, None] - position[None, :]).abs()  # (T, T) |i - j|
    n_keys = keys.sum(-1)  # (B,)
    n_queries = queries.sum(-1)  # (B,)
    distance_chance = safe_divide(keys @ gap, n_keys[:, None].expand_as(queries)).nan_to_num(0.0)  # (B, T): mean |i - j| over real keys
    return {
        "mass_sum": mass.double().sum(1),
        "entropy_sum": entropy_sums.double().sum(1),
        "distance_sum": distance_sums.double().sum(1),
        "queries": n_queries.sum().double(),
        "separators_chance_sum": (n_queries * safe_divide(member[..., -1].sum(-1), n_keys).nan_to_num(0.0)).sum().double(),
        "entropy_chance_sum": (n_queries * torch.log(n_keys.clamp_min(1.0))).sum().double(),
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
        category_ids: category name -> token ids (e.g. ``{"cls": [101], "sep": [102], ...}``).

    States (float64 sums): attention mass per category and on their union
    (L, H, C + 1), entropy and distance (L, H), summed over queries; the
    number of queries and the uniform-attention (chance) sums ().
    """

    reducers = (SeparatorSums,)

    def __init__(self, n_layers: int, n_heads: int, category_ids: Dict[str, Sequence[int]], seq_len: Optional[int] = None):
        super().__init__()
        self.seq_len = seq_len
        self.categories = tuple(category_ids)
        self.category_ids = [tuple(int(i) for i in category_ids[c]) for c in self.categories]
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
        shape = (view.batch_size, view.n_layers, view.n_heads)
        key_mass = sums.key_mass.reshape(*shape, -1).transpose(0, 1)  # (L, B, H, T)
        entropy = sums.entropy.reshape(*shape, 1).transpose(0, 1)[..., 0]  # (L, B, H)
        distance = sums.distance.reshape(*shape, 1).transpose(0, 1)[..., 0]  # (L, B, H)
        self.fold(_separator_update(key_mass, entropy, distance, view.batch["input_ids"], view.batch["attention_mask"].float(), view.tokens.float(), self.category_ids))
        if self.seq_len is not None:
            keys = view.batch["attention_mask"].double()  # (B, T) real keys
            queries = view.tokens.double().sum(-1)  # (B,)
            # uniform attention: each query gives 1 / n_keys to every real key
            chance = (queries[:, None] * safe_divide(keys, keys.sum(-1, keepdim=True).expand_as(keys)).nan_to_num(0.0)).sum(0)
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
