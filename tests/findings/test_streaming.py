"""Every accumulator of the paper's findings: two halves merged equal the whole, and a window's
statistics do not change when it is batched with longer, padded windows."""

from __future__ import annotations

import pytest

from attnsim.stats.anchors import AnchorAccumulator
from attnsim.stats.attention_regions import AttentionRegionAccumulator
from attnsim.stats.distance import DistanceAccumulator
from attnsim.stats.noise import NoiseAccumulator
from attnsim.stats.repetition import RepetitionAccumulator
from attnsim.stats.sentences import SentenceAccumulator
from attnsim.stats.separators import SeparatorAccumulator
from tests.helpers.findings import CATEGORIES, VOCAB, assert_same, random_windows, stack_view

L, H = 2, 3

# name -> (factory(seq_len), whether the statistics depend on the window length T)
ACCUMULATORS = {
    "distance": (lambda T: DistanceAccumulator(L, H, T, short_range=2), True),
    "sentences": (lambda T: SentenceAccumulator(L, H), False),
    "anchors": (lambda T: AnchorAccumulator(L, H, VOCAB), False),
    "repetition": (lambda T: RepetitionAccumulator(L, H), True),
    "attention_regions": (lambda T: AttentionRegionAccumulator(L, H), False),
    "separators": (lambda T: SeparatorAccumulator(L, H, CATEGORIES), False),
    "noise": (lambda T: NoiseAccumulator(L, H, short_range=2), False),
}


@pytest.mark.parametrize("name", sorted(ACCUMULATORS))
@pytest.mark.parametrize("include_special", [True, False])
def test_two_halves_merged_equal_the_whole(name, include_special):
    factory, _ = ACCUMULATORS[name]
    T = 16
    windows = random_windows([16, 12, 9, 16, 14, 10], T, L, H, seed=1)
    whole = factory(T)
    whole.update(stack_view(windows, include_special=include_special))
    first, second = factory(T), factory(T)
    first.update(stack_view(windows[:3], include_special=include_special))
    second.update(stack_view(windows[3:], include_special=include_special))
    assert_same(first.merge(second).compute(), whole.compute())


@pytest.mark.parametrize("name", sorted(ACCUMULATORS))
def test_window_unchanged_when_batched_with_longer_padded_windows(name):
    factory, depends_on_length = ACCUMULATORS[name]
    T = 20
    short, long_a, long_b = random_windows([11, 20, 17], T, L, H, seed=2)
    # alone: at its own length (no padding), or padded to T when statistics depend on T
    alone_len = T if depends_on_length else short["length"]
    separate = factory(alone_len)
    separate.update(stack_view([short], alone_len))
    others = factory(T)
    others.update(stack_view([long_a, long_b], T))
    if not depends_on_length:
        # compare states of the same shape: the short window's sums plus the others' sums
        combined = factory(T)
        combined.merge(separate).merge(others)
    else:
        combined = separate.merge(others)
    batched = factory(T)
    batched.update(stack_view([long_a, short, long_b], T))
    assert_same(combined.compute(), batched.compute())
