"""attnsim.capture.load: its functions on hand-worked inputs."""

from __future__ import annotations

import pytest
import torch

from attnsim.capture.gradients import load_classifier
from attnsim.capture.load import inspect_model


def test_random_head_is_seeded_and_tagged(tiny_bert):
    info = inspect_model(str(tiny_bert), 16)
    first, tags = load_classifier(info, seed=5, num_labels=4)
    second, _ = load_classifier(info, seed=5, num_labels=4)
    third, _ = load_classifier(info, seed=6, num_labels=4)
    assert tags["attnsim.classifier_head"] == "random_seeded" and tags["attnsim.num_labels"] == "4"
    assert torch.equal(first.classifier.weight, second.classifier.weight)
    assert not torch.equal(first.classifier.weight, third.classifier.weight)
    assert not first.training and not any(p.requires_grad for p in first.parameters())


def test_seq_len_goes_to_the_model_positions_not_a_smaller_tokenizer_limit(tmp_path):
    """A decoder with 1,024 rotary positions and a tokenizer saved with model_max_length 512 takes corpus.seq_len=1024;
    1,025 is refused naming the model's limit."""

    from attnsim.capture.load import inspect_model, load_tokenizer
    from attnsim.errors import ConfigError
    from tests.helpers.tiny_models import save_tiny

    path = save_tiny(tmp_path / "llama", "llama", positions=1024)
    info = inspect_model(str(path), 1024)
    assert load_tokenizer(info, 1024).is_fast
    with pytest.raises(ConfigError, match="1024"):
        inspect_model(str(path), 1025)


def test_windows_longer_than_a_sliding_attention_window_are_warned_about(caplog):
    """Chance levels count every earlier key; a sliding-window layer's query sees at most `sliding_window` of them."""
    import logging
    from types import SimpleNamespace

    from attnsim.capture.load import warn_sliding_window

    with caplog.at_level(logging.WARNING):
        assert warn_sliding_window(SimpleNamespace(sliding_window=512), 2048, "gemma-3-270m")
        assert not warn_sliding_window(SimpleNamespace(sliding_window=512), 512, "gemma-3-270m")  # exact at or below the window
        assert not warn_sliding_window(SimpleNamespace(sliding_window=None), 4096, "llama")
        assert not warn_sliding_window(SimpleNamespace(), 4096, "bert")
    assert caplog.text.count("sliding attention window (512 tokens)") == 1 and "corpus.seq_len to at most 512" in caplog.text
