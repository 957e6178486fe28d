"""attnsim.capture.gradients: its functions on hand-worked inputs."""

from __future__ import annotations

import pytest
import torch

from attnsim.capture.gradients import GradientModule, load_classifier, select_target
from attnsim.capture.load import inspect_model
from attnsim.errors import ModelError


def test_select_target():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert select_target(logits).tolist() == [1, 0]
    assert select_target(logits, 2).tolist() == [2, 2]
    with pytest.raises(ValueError, match="does not exist"):
        select_target(logits, 3)


def test_gradient_capture_refuses_inference_mode(tiny_bert):
    info = inspect_model(str(tiny_bert), 16)
    model, _ = load_classifier(info, seed=0)
    module = GradientModule(model, info, "z")
    batch = {
        "input_ids": torch.tensor([[101, 2054, 102]]),
        "attention_mask": torch.ones(1, 3, dtype=torch.long),
        "special_mask": torch.zeros(1, 3, dtype=torch.bool),
    }
    with torch.inference_mode(), pytest.raises(ModelError, match="inference_mode=False"):
        module.predict_step(batch, 0)
