"""attnsim.stats.induction: earlier occurrences of repeated tokens (Olsson et al. 2022's induction pattern), by hand."""

from __future__ import annotations

import torch

from attnsim.stats.induction import earlier_occurrences, earlier_positions


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
