"""Causal (decoder) semantics of the statistics, on hand-made tensors: rollout, readout and first token,
separators and attention-map chance levels, symmetric attention pairs."""

from __future__ import annotations

import math

import torch

from attnsim.findings.categories import TokenCategories
from attnsim.stats.attention_maps import AttentionMapAccumulator
from attnsim.stats.attention_regions import AttentionRegionAccumulator
from attnsim.stats.rollout import attention_rollout
from attnsim.stats.separators import SeparatorAccumulator
from tests.helpers.findings import PERIOD, batch_of, symmetric, view_from_csm

NEWLINE = 1013


def causal_softmax(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Row-softmax of (..., T, T) scores over keys j <= i that are real: a decoder's attention."""
    size = scores.shape[-1]
    allowed = torch.tril(torch.ones(size, size, dtype=torch.bool)) & valid[:, None, None, :].bool()  # (B, 1, T, T)
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)


def test_rollout_of_causal_attention_is_lower_triangular_with_rows_summing_to_one():
    torch.manual_seed(0)
    layers, batch, heads, size = 3, 2, 4, 6
    valid = torch.ones(batch, size, dtype=torch.bool)
    valid[1, 4:] = False  # padding at the end of the second window
    attention = causal_softmax(torch.randn(layers, batch, heads, size, size), valid)
    for fusion, discard in (("mean", 0.0), ("max", 0.0), ("mean", 0.5)):
        rollout = attention_rollout(attention, valid, fusion, discard)
        upper = torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
        assert rollout[..., upper].abs().max() == 0, fusion  # no token mixes a later one
        assert torch.allclose(rollout.sum(-1), torch.ones(layers, batch, size, dtype=rollout.dtype), atol=1e-6), fusion


def test_causal_categories_read_out_the_last_real_token_and_name_the_first_token():
    # a GPT-2 window (no BOS: the first token is text) and a padded one
    ids = torch.tensor([[7, 8, PERIOD, 9], [7, 8, 0, 0]])
    batch = batch_of(ids, specials=())
    causal = TokenCategories(None, causal=True)
    assert causal.readout(batch).tolist() == [3, 1]
    assert causal.masks(batch)["cls"].tolist() == [[True, False, False, False], [True, False, False, False]]
    assert causal.keep(batch).tolist() == [[True, False, False, True], [True, True, False, False]]
    assert TokenCategories(None).readout(batch).tolist() == [0, 0] and causal.readout_name == "last token"


# a GPT-2-like window: "a . b \n" with no BOS; rows are queries, lower-triangular
CAUSAL_ATTENTION = torch.tensor(
    [
        [1.0, 0.0, 0.0, 0.0],
        [0.5, 0.5, 0.0, 0.0],
        [0.6, 0.2, 0.2, 0.0],
        [0.1, 0.1, 0.4, 0.4],
    ]
)
CAUSAL_IDS = torch.tensor([[5, PERIOD, 6, NEWLINE]])


def test_separators_first_token_newline_and_causal_chance_by_hand():
    view = view_from_csm(torch.zeros(1, 1, 1, 4, 4), batch_of(CAUSAL_IDS, specials=()), CAUSAL_ATTENTION[None, None, None])
    acc = SeparatorAccumulator(1, 1, {"cls": [], "sep": [], "period": [PERIOD], "comma": [], "newline": [NEWLINE]}, causal=True)
    acc.update(view)
    out = {k: float(v) for k, v in acc.compute().items()}
    assert math.isclose(out["attention_cls"], (1.0 + 0.5 + 0.6 + 0.1) / 4, rel_tol=1e-6)  # the first token, though not special
    assert math.isclose(out["attention_period"], (0.5 + 0.2 + 0.1) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_newline"], 0.4 / 4, rel_tol=1e-6)
    # the union is the first four categories: the newline is not in it
    assert math.isclose(out["attention_separators"], (1.0 + 1.0 + 0.8 + 0.2) / 4, rel_tol=1e-6)
    # query i sees i + 1 keys: separators (first token, ".") among them: 1/1, 2/2, 2/3, 2/4
    assert math.isclose(out["attention_separators_chance"], (1 + 1 + 2 / 3 + 2 / 4) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_entropy_chance"], (math.log(1) + math.log(2) + math.log(3) + math.log(4)) / 4, rel_tol=1e-6)
    # uniform over keys 0..i: mean distance i/2
    assert math.isclose(out["attention_distance_chance"], (0 + 0.5 + 1 + 1.5) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_distance"], (0 + 0.5 + (1.2 + 0.2) + (0.3 + 0.2 + 0.4)) / 4, rel_tol=1e-6)


def test_separators_chance_of_an_encoder_is_unchanged():
    view = view_from_csm(torch.zeros(1, 1, 1, 4, 4), batch_of(CAUSAL_IDS, specials=()), CAUSAL_ATTENTION[None, None, None])
    acc = SeparatorAccumulator(1, 1, {"cls": [], "sep": [], "period": [PERIOD], "comma": []})
    acc.update(view)
    out = {k: float(v) for k, v in acc.compute().items()}
    assert math.isclose(out["attention_separators_chance"], 2 / 4, rel_tol=1e-6) and math.isclose(out["attention_entropy_chance"], math.log(4), rel_tol=1e-6)


def test_attention_map_chance_levels_of_a_decoder():
    acc = AttentionMapAccumulator(1, 1, 4, causal=True)
    acc.update(CAUSAL_ATTENTION[None, None, None].double(), torch.ones(1, 4, dtype=torch.bool))
    out = {k: float(v) for k, v in acc.compute().items() if k != "matrix"}
    harmonic = (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4
    assert math.isclose(out["self_mass_chance"], harmonic, rel_tol=1e-9) and math.isclose(out["confidence_chance"], harmonic, rel_tol=1e-9)
    assert math.isclose(out["previous_mass_chance"], (1 / 2 + 1 / 3 + 1 / 4) / 3, rel_tol=1e-9)
    assert out["next_mass"] == 0.0 and out["next_mass_chance"] == 0.0  # a decoder never sees the next token
    assert math.isclose(out["previous_mass"], (0.5 + 0.2 + 0.4) / 3, rel_tol=1e-6)


def test_attention_regions_of_causal_attention_read_the_later_tokens_attention():
    """max(A[i, j], A[j, i]) of a pair i < j is A[j, i] for a decoder: the later token's attention to the earlier."""
    csm = symmetric(4, {(0, 1): 1, (0, 2): 9, (0, 3): 2, (1, 2): 3, (1, 3): 4, (2, 3): 8})
    view = view_from_csm(csm[None, None, None], batch_of(CAUSAL_IDS, specials=()), CAUSAL_ATTENTION[None, None, None], top_fraction=0.34)
    acc = AttentionRegionAccumulator(1, 1)
    acc.update(view)
    out = {k: float(v) for k, v in acc.compute().items()}
    # k = 2 of 6 pairs; the later token's attention: (0,2) 0.6, (0,1) 0.5, (2,3) 0.4, (1,2) 0.2, (0,3) 0.1, (1,3) 0.1
    assert math.isclose(out["high_in_region_share"], 1 / 2, rel_tol=1e-6)  # high CSM {(0,2), (2,3)}: only (0,2) inside
    assert math.isclose(out["csm_inside_mean"], (9 + 1) / 2, rel_tol=1e-6)
