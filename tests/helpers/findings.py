"""Builders of tiny PairViews for the accumulator tests of the paper's findings.

Two kinds:

- :func:`view_from_csm`: a view whose CSM is written by hand (the statistics
  only read CSM values, high pairs and the batch), for hand-worked tests
  (:class:`tests.reference.HandView`).
- :func:`random_windows` / :func:`random_view`: windows of given lengths with
  random vectors and model-like attention (rows are softmax distributions
  over the real keys, exactly 0 on padded keys); padded positions hold large
  garbage vectors and garbage attention rows, so any leak of padding into a
  statistic shows.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from attnsim.stats.pairs import PairView
from tests.helpers.reference import HandView

CLS, SEP, PAD = 101, 102, 0
PERIOD, COMMA = 1012, 1010
VOCAB = 1100
CATEGORIES = {"cls": [CLS], "sep": [SEP], "period": [PERIOD], "comma": [COMMA]}


def symmetric(seq_len: int, values: Dict[tuple, float], fill: float = 0.0) -> torch.Tensor:
    """A T x T symmetric matrix with ``values[(i, j)]`` at (i, j) and (j, i), ``fill`` elsewhere, zero diagonal."""
    matrix = torch.full((seq_len, seq_len), float(fill))
    for (i, j), value in values.items():
        matrix[i, j] = matrix[j, i] = float(value)
    matrix.fill_diagonal_(0.0)
    return matrix


def batch_of(input_ids: torch.Tensor, sentence_ids: Optional[torch.Tensor] = None, specials: Sequence[int] = (CLS, SEP)) -> Dict[str, torch.Tensor]:
    """A batch dict from (batch, T) token ids: padding where id == PAD, special tokens by id."""
    input_ids = torch.as_tensor(input_ids).long()
    special = torch.isin(input_ids, torch.tensor(list(specials)))
    if sentence_ids is None:
        sentence_ids = torch.where(special | (input_ids == PAD), -1, 0)
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != PAD).long(),
        "special_mask": special,
        "sentence_ids": torch.as_tensor(sentence_ids).long(),
    }


def view_from_csm(
    csm: torch.Tensor,
    batch: Dict[str, torch.Tensor],
    attention: Optional[torch.Tensor] = None,
    top_fraction: float = 0.02,
    include_special: bool = True,
    **settings,
) -> PairView:
    """A PairView whose CSM is ``csm`` (layer, batch, head, T, T) instead of z zᵀ."""
    return HandView(csm, batch, attention, top_fraction=top_fraction, include_special=include_special, **settings)


def random_windows(lengths: Sequence[int], seq_len: int, n_layers: int = 2, n_heads: int = 3, d_head: int = 4, seed: int = 0) -> List[dict]:
    """One dict per window (its own data at full length ``seq_len``): ids, sentence ids, z, attention.

    Content ids are drawn from a small set (so identical tokens recur) that includes "." and ",".
    """
    generator = torch.Generator().manual_seed(seed)
    windows = []
    for n in lengths:
        ids = torch.full((seq_len,), PAD, dtype=torch.long)
        content = torch.tensor([PERIOD, COMMA, 200, 201, 202, 203, 204, 205])[torch.randint(0, 8, (n - 2,), generator=generator)]
        ids[0], ids[1 : n - 1], ids[n - 1] = CLS, content, SEP
        sentence = torch.full((seq_len,), -1, dtype=torch.long)
        sentence[1 : n - 1] = torch.arange(n - 2) // 3  # sentences of three tokens
        z = torch.randn(n_layers, n_heads, seq_len, d_head, generator=generator)
        z[:, :, n:] *= 50.0  # garbage on padding
        scores = torch.randn(n_layers, n_heads, seq_len, seq_len, generator=generator)
        scores[..., n:] = float("-inf")  # padded keys get exactly 0 probability, as in the model
        attention = torch.softmax(scores, -1)
        attention[:, :, n:, :] = torch.rand(n_layers, n_heads, seq_len - n, seq_len, generator=generator)  # garbage query rows
        windows.append({"ids": ids, "sentence": sentence, "z": z, "attention": attention, "length": n})
    return windows


def stack_view(windows: Sequence[dict], seq_len: Optional[int] = None, top_fraction: float = 0.1, include_special: bool = True, **settings) -> PairView:
    """A PairView of ``windows`` (from :func:`random_windows`), cut or kept at ``seq_len`` tokens."""
    seq_len = seq_len or windows[0]["ids"].shape[0]
    ids = torch.stack([w["ids"][:seq_len] for w in windows])
    sentence = torch.stack([w["sentence"][:seq_len] for w in windows])
    z = torch.stack([w["z"][:, :, :seq_len] for w in windows], 1)  # (L, B, H, T, d)
    attention = torch.stack([w["attention"][:, :, :seq_len, :seq_len] for w in windows], 1)  # (L, B, H, T, T)
    return PairView(z, batch_of(ids, sentence), attention, top_fraction=top_fraction, include_special=include_special, **settings)


def assert_same(left: Dict[str, torch.Tensor], right: Dict[str, torch.Tensor], rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """Two ``compute()`` outputs are equal up to float32 rounding of per-batch sums (NaN where the other is NaN)."""
    assert left.keys() == right.keys()
    for key in left:
        a, b = left[key].double(), right[key].double()
        assert a.shape == b.shape, key
        assert torch.equal(a.isnan(), b.isnan()), key
        assert torch.allclose(a.nan_to_num(0.0), b.nan_to_num(0.0), rtol=rtol, atol=atol), key
