"""The residual kind of run: chosen for the residual-stream findings (dla, logit_lens) of a causal LM, refused beside
findings of the attention capture or on a model that is not a causal LM, before any weights load."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnsim.capture.architectures import architecture_for
from attnsim.capture.load import ModelInfo
from attnsim.config import load_config
from attnsim.errors import ConfigError
from attnsim.findings.registry import FINDINGS
from attnsim.workflows.kinds import ResidualRun, TextRun, choose_kind


def kind_of(experiment: str, model_type: str, *overrides: str):
    cfg = load_config(experiment, list(overrides))
    info = ModelInfo("x", "x", model_type, 2, 4, 8, 32, 512, architecture_for(model_type), SimpleNamespace(model_type=model_type))
    return choose_kind(cfg, info, [FINDINGS[name] for name in cfg.findings])


def test_residual_findings_get_the_residual_kind_with_the_names_they_read():
    dla = kind_of("dla", "llama")
    assert type(dla) is ResidualRun and type(dla.inner) is TextRun and not dla.examples
    assert dla.names == ("result", "mlp_out", "resid_pre")
    both = kind_of("dla", "gpt2", "findings=[dla,logit_lens]")
    assert both.names == ("result", "mlp_out", "resid_pre", "resid_post")


def test_residual_findings_beside_capture_findings_or_on_an_encoder_are_refused():
    with pytest.raises(ConfigError, match=r"findings=\['dla', 'csm'\]: dla read the residual stream .* `attnsim run dla` and `attnsim run csm`"):
        kind_of("dla", "llama", "findings=[dla,csm]")
    with pytest.raises(ConfigError, match="logit_lens need a causal language model .* model type bert"):
        kind_of("logit_lens", "bert")


def test_per_head_attribution_is_refused_where_the_block_norms_the_attention_s_output():
    """Gemma 3 norms W_O's output before the residual add: dla (heads' results added to the stream) is refused, the
    logit lens (the stream itself) is not."""
    with pytest.raises(ConfigError, match=r"dla add each head's output .*\(model type gemma3_text\) norms the attention's output"):
        kind_of("dla", "gemma3_text")
    assert kind_of("logit_lens", "gemma3_text").names == ("resid_post",)
