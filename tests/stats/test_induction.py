"""attnsim.stats.induction: earlier occurrences of repeated tokens (Olsson et al. 2022's induction pattern), by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim.stats.induction import InductionAccumulator, earlier_occurrences, earlier_positions
from attnsim.stats.pairs import PairView


def test_each_token_links_to_its_most_recent_earlier_content_occurrence():
    ids = torch.tensor([[7, 8, 7, 9, 7, 8]])
    content = torch.ones_like(ids, dtype=torch.bool)
    assert earlier_positions(ids, content).tolist() == [[-1, -1, 0, -1, 2, 1]]
    content[0, 2] = False  # the middle 7 is not content (e.g. a special token): it neither repeats nor is repeated
    assert earlier_positions(ids, content).tolist() == [[-1, -1, -1, -1, 0, 1]]


def test_every_earlier_occurrence_follows_the_links():
    earlier = torch.tensor([[-1, -1, 0, -1, 2, 1]])  # token 4 repeats 2, which repeats 0
    found = earlier_occurrences(earlier)[0]
    assert found.nonzero().tolist() == [[2, 0], [4, 0], [4, 2], [5, 1]]
    # a link that does not point strictly back is ignored
    assert not earlier_occurrences(torch.tensor([[-1, 1]])).any()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_real_decoder_attention_is_read_as_causal(family, tmp_path):
    """A tiny decoder's own eager attention (transformers, no attnsim capture) on repeated_tokens windows:
    its masked cells are exact zeros, so every head gets the causal chance, and the scores are finite."""
    from transformers import AutoModelForCausalLM

    from attnsim.data.module import collate_windows
    from attnsim.data.repeated import repeated_corpus
    from tests.helpers.tiny_models import save_tiny, train_tokenizer

    tokenizer = train_tokenizer(family)
    model = AutoModelForCausalLM.from_pretrained(save_tiny(tmp_path, family), attn_implementation="eager").eval()
    corpus = repeated_corpus(tokenizer, seq_len=24, windows=2, repeat_length=10, repeats=2, seed=3)
    batch = collate_windows(list(enumerate(corpus.windows)))
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_attentions=True)
    attention = torch.stack(out.attentions)  # (L, B, H, T, T)
    view = PairView(torch.randn(*attention.shape[:4], 8), batch, attention)
    acc = InductionAccumulator(attention.shape[0], attention.shape[2])
    acc.update(view)
    scores = acc.compute()
    start = 1 if family == "llama" else 0  # <s> before the copies
    chance = np.mean([1 / (i + 1) for i in range(start + 10, start + 20)])
    assert torch.allclose(scores["induction_score_chance"], torch.full_like(scores["induction_score_chance"], chance))
    real = start + 20
    assert torch.allclose(scores["prev_token_score_chance"], torch.full_like(scores["prev_token_score_chance"], np.mean([1 / (i + 1) for i in range(1, real)])))
    assert all(torch.isfinite(v).all() for v in scores.values())
