"""One object per kind of run: architectures declare their kind, the run's kind is chosen once
(:func:`attnsim.workflows.kinds.choose_kind`), corpora share one protocol, and ``workflows/run.py`` holds no
branch on the kind."""

from __future__ import annotations

import ast
from dataclasses import fields
from types import SimpleNamespace

import pytest

from attnsim.capture.architectures import ARCHITECTURES, SEQ2SEQ_ARCHITECTURES, ModelKind, architecture_for
from attnsim.capture.load import ModelInfo
from attnsim.config import load_config
from attnsim.data.corpus import MeasuredCorpus
from attnsim.data.images import ImageCorpus
from attnsim.data.prompt_pairs import PromptPairCorpus
from attnsim.data.translation import PairCorpus
from attnsim.data.windows import Corpus
from attnsim.errors import ConfigError
from attnsim.findings.registry import FINDINGS
from attnsim.workflows.kinds import EncoderDecoderRun, GradientRun, ImageRun, InterventionRun, TextRun, choose_kind
from tests.helpers.paths import ROOT

RUN = ROOT / "attnsim" / "workflows" / "run.py"


def info(model_type: str) -> ModelInfo:
    return ModelInfo("x", "x", model_type, 2, 4, 8, 32, 512, architecture_for(model_type), SimpleNamespace(model_type=model_type))


def test_every_family_declares_one_kind_and_the_facts_follow_from_it():
    expected = {
        "vit": ModelKind.VISION,
        "deit": ModelKind.VISION,
        "dinov2": ModelKind.VISION,
        "bert": ModelKind.ENCODER,
        "distilbert": ModelKind.ENCODER,
        "gpt2": ModelKind.DECODER,
        "llama": ModelKind.DECODER,
    }
    for name, kind in expected.items():
        assert ARCHITECTURES[name].kind is kind
    for name, arch in {**ARCHITECTURES, **SEQ2SEQ_ARCHITECTURES}.items():
        assert (arch.vision, arch.causal, arch.seq2seq) == (
            arch.kind is ModelKind.VISION,
            arch.kind is ModelKind.DECODER,
            arch.kind is ModelKind.ENCODER_DECODER,
        ), name
    assert all(arch.kind is ModelKind.ENCODER_DECODER for arch in SEQ2SEQ_ARCHITECTURES.values())
    assert info("gpt2").kind is ModelKind.DECODER and info("gpt2").causal and not info("t5").causal


def kind_of(experiment: str, model_type: str, *overrides: str):
    cfg = load_config(experiment, list(overrides))
    return choose_kind(cfg, info(model_type), [FINDINGS[name] for name in cfg.findings])


def test_the_kind_is_chosen_from_the_model_the_findings_and_the_corpus():
    assert repr(kind_of("csm", "bert")) == "TextRun(validation=False)"
    assert type(kind_of("induction", "gpt2")) is TextRun
    assert type(kind_of("vit_csm", "vit")) is ImageRun
    gradients = kind_of("gradient_maps", "bert")
    assert type(gradients) is GradientRun and type(gradients.inner) is TextRun and not gradients.inference_mode
    assert type(kind_of("gradient_maps", "vit", "corpus.source=images").inner) is ImageRun
    pairs = kind_of("alignment", "t5")
    assert type(pairs) is EncoderDecoderRun and not pairs.examples
    ablation = kind_of("ablation", "bert", "interventions.split=validation")
    assert type(ablation) is InterventionRun and ablation.inner.validation and not ablation.patching and not ablation.examples
    assert kind_of("patching", "gpt2").patching
    assert kind_of("csm", "bert").examples and kind_of("csm", "bert").inference_mode


def test_a_kind_that_does_not_fit_is_refused_as_before():
    with pytest.raises(ConfigError, match="encoder–decoder"):
        kind_of("csm", "t5")
    with pytest.raises(ConfigError, match="cannot share a run with other findings"):
        kind_of("csm", "bert", "findings=[csm,ablation]")


@pytest.mark.parametrize("kind", [Corpus, ImageCorpus, PairCorpus, PromptPairCorpus])
def test_every_corpus_offers_the_protocol(kind):
    members = {f.name for f in fields(kind)} | set(dir(kind))
    assert {"seq_len", "documents_used", "measured_len", "layout", "content_hash", "datamodule", "__len__"} <= members


def test_corpora_build_their_own_datamodule():
    from attnsim.data.module import WindowDataModule
    from attnsim.data.prompt_pairs import PromptPairDataModule

    text = Corpus([], 16, 0, 0, unk_token_id=3)
    assert isinstance(text, MeasuredCorpus) and text.measured_len == 16 and text.layout is None
    module = text.datamodule(4, 0)
    assert isinstance(module, WindowDataModule) and module.batch_size == 4 and module.unk_token_id == 3
    prompts = PromptPairCorpus([], 9, 0, "0" * 64, pad_id=5)
    assert isinstance(prompts, MeasuredCorpus) and isinstance(prompts.datamodule(2), PromptPairDataModule) and prompts.datamodule(2).pad_id == 5


def test_run_py_holds_no_branch_on_the_kind():
    """No condition in workflows/run.py reads what kind of model, corpus or finding the run has, nor which kind object it holds (it may read
    the kind object's own declarations, e.g. ``kind.examples``)."""
    kind_words = {
        "vision",
        "causal",
        "seq2seq",
        "encoder_decoder",
        "needs_gradients",
        "needs_interventions",
        "interventions",
        "layout",
        "arch",
        "source",
        "ModelKind",
        "TextRun",
        "ImageRun",
        "GradientRun",
        "EncoderDecoderRun",
        "InterventionRun",
        "images",
        "translation",
        "patching",
        "repeated_tokens",
    }
    tree = ast.parse(RUN.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            read = {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)} | {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            read |= {n.value for n in ast.walk(node.test) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            assert not read & kind_words, f"run.py line {node.lineno} branches on {sorted(read & kind_words)}"
    assert len(RUN.read_text(encoding="utf-8").splitlines()) <= 600
