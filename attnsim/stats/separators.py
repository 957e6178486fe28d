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

from typing import Dict, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

CATEGORIES = ("cls", "sep", "period", "comma")


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


class SeparatorAccumulator(Accumulator):
    """Streaming attention mass on separator tokens, entropy and distance per layer and head.

    Args:
        n_layers, n_heads: model shape.
        category_ids: category name -> token ids (e.g. ``{"cls": [101], "sep": [102], ...}``).

    States (float64 sums): attention mass per category and on their union
    (L, H, C + 1), entropy and distance (L, H), summed over queries; the
    number of queries and the uniform-attention (chance) sums ().
    """

    def __init__(self, n_layers: int, n_heads: int, category_ids: Dict[str, Sequence[int]]):
        super().__init__()
        self.categories = tuple(category_ids)
        self.category_ids = [tuple(int(i) for i in category_ids[c]) for c in self.categories]
        self.add_sum("mass_sum", n_layers, n_heads, len(self.categories) + 1)
        self.add_sum("entropy_sum", n_layers, n_heads)
        self.add_sum("distance_sum", n_layers, n_heads)
        self.add_sum("queries")
        self.add_sum("separators_chance_sum")
        self.add_sum("entropy_chance_sum")
        self.add_sum("distance_chance_sum")

    def update(self, view: PairView) -> None:  # type: ignore[override]
        if not view.has_attention:
            raise ValueError("The separators statistics need attention probabilities; the finding must set needs_attention = True.")
        keys = view.batch["attention_mask"].float()  # (B, T)
        queries = view.tokens.float()  # (B, T)
        member = key_categories(view.batch["input_ids"], keys, self.category_ids)  # (B, T, C+1)
        # mass on a category = the attention each key receives from the queries, summed over its keys
        mass = torch.einsum("lbhj,bjc->lbhc", view.attention_key_mass, member)  # (L, B, H, C+1)
        self.mass_sum += mass.double().sum(1)
        self.entropy_sum += view.attention_entropy_sums.double().sum(1)
        self.distance_sum += view.attention_distance_sums.double().sum(1)
        seq_len = keys.shape[-1]
        position = torch.arange(seq_len, device=keys.device, dtype=keys.dtype)
        gap = (position[:, None] - position[None, :]).abs()  # (T, T) |i - j|
        n_keys = keys.sum(-1)  # (B,)
        n_queries = queries.sum(-1)  # (B,)
        self.queries += n_queries.sum().double()
        self.separators_chance_sum += (n_queries * safe_divide(member[..., -1].sum(-1), n_keys).nan_to_num(0.0)).sum().double()
        self.entropy_chance_sum += (n_queries * torch.log(n_keys.clamp_min(1.0))).sum().double()
        distance_chance = safe_divide(keys @ gap, n_keys[:, None].expand_as(queries)).nan_to_num(0.0)  # (B, T): mean |i - j| over real keys
        self.distance_chance_sum += (queries * distance_chance).sum().double()

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars (see :func:`scalar_names`), each (layer, head) float64; NaN without queries."""
        shape = self.entropy_sum.shape
        queries = self.queries.expand(shape)
        out = {f"attention_{c}": safe_divide(self.mass_sum[..., i], queries) for i, c in enumerate(self.categories)}
        out["attention_separators"] = safe_divide(self.mass_sum[..., -1], queries)
        out["attention_separators_chance"] = safe_divide(self.separators_chance_sum.expand(shape), queries)
        out["attention_entropy"] = safe_divide(self.entropy_sum, queries)
        out["attention_entropy_chance"] = safe_divide(self.entropy_chance_sum.expand(shape), queries)
        out["attention_distance"] = safe_divide(self.distance_sum, queries)
        out["attention_distance_chance"] = safe_divide(self.distance_chance_sum.expand(shape), queries)
        return out
