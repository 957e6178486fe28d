"""attnsim.findings.ablation: its functions on hand-worked inputs."""

from __future__ import annotations

import pytest

from attnsim.errors import ConfigError
from attnsim.findings.ablation import build_plan


def test_listed_heads_outside_the_model_and_no_heads_are_refused():
    with pytest.raises(ConfigError, match="outside the model's 2 layers x 4 heads"):
        build_plan(2, 4, [[0, 1], [2, 0]], [], 2, 0, ("cosine",))
    with pytest.raises(ConfigError, match="no head to ablate"):
        build_plan(2, 4, None, [], 2, 0, ("cosine",))
