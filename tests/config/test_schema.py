"""Schema: choice keys typed by str-valued Enums, range checks in each group's check(), finding names given.

Allowed values live in one place, the schema's Enums (not in comments or a separate table), and the
config package does not import the findings registry.
"""

from __future__ import annotations

import ast
from enum import Enum
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import attnsim.config as config
from attnsim.config import (
    Accelerator,
    CorpusConfig,
    MapsConfig,
    Normalise,
    PlotsConfig,
    RunConfig,
    Source,
    StatsConfig,
    TrainerConfig,
    choices,
    flatten,
    load_config,
    schema_type,
    to_yaml,
    validate,
)
from attnsim.errors import ConfigError

CHOICE_KEYS = {
    "model.init": ("pretrained", "random"),
    "model.vector": ("z", "result"),
    "model.attn_implementation": ("auto", "eager", "sdpa"),
    "model.dtype": ("float32", "bfloat16", "float16"),
    "corpus.source": ("bbc", "text", "jsonl", "images", "repeated_tokens", "translation"),
    "maps.head_fusion": ("mean", "max", "min"),
    "stats.high_rule": ("top_fraction", "zscore"),
    "stats.normalise": ("none", "cosine"),
    "trainer.accelerator": ("cpu", "gpu", "cuda", "mps", "auto"),
    "task": ("measure", "finetune"),
}


@pytest.mark.parametrize("key", sorted(CHOICE_KEYS))
def test_choice_keys_are_enums_with_their_values(key):
    kind = schema_type(key)
    assert isinstance(kind, type) and issubclass(kind, Enum) and issubclass(kind, str)
    assert choices(key) == CHOICE_KEYS[key]
    assert not hasattr(config, "CHOICES")


@pytest.mark.parametrize("key", sorted(CHOICE_KEYS))
def test_a_bad_choice_names_the_key_and_the_allowed_values(key, tmp_path):
    allowed = ", ".join(CHOICE_KEYS[key])
    with pytest.raises(ConfigError, match=rf"'{key}' is 'nope'; allowed values: {allowed} \(set in the command-line overrides\)"):
        load_config("csm", [f"{key}=nope"])
    path = tmp_path / "bad.yaml"
    section, _, leaf = key.rpartition(".")
    path.write_text(f"{section}:\n  {leaf}: nope\n" if section else f"{leaf}: nope\n")
    with pytest.raises(ConfigError, match=rf"'{key}' is 'nope'; allowed values: {allowed} \(set in {path}\)"):
        load_config(str(path))


def test_choices_keep_their_text_everywhere():
    cfg = load_config("csm", ["stats.normalise=none", "trainer.accelerator=gpu", "corpus.source=images", "model.init=random"])
    assert cfg.stats.normalise is Normalise.none and cfg.stats.normalise == "none"
    assert cfg.trainer.accelerator == Accelerator.gpu == "gpu" and f"{cfg.trainer.accelerator}" == "gpu"
    assert cfg.corpus.source is Source.images
    params = flatten(cfg)
    assert (params["stats.normalise"], params["trainer.accelerator"], params["model.init"]) == ("none", "gpu", "random")
    assert "normalise: none" in to_yaml(cfg) and "accelerator: gpu" in to_yaml(cfg)


@pytest.mark.parametrize(
    "group, match",
    [
        (CorpusConfig(seq_len=4), r"'corpus.seq_len' is 4"),
        (CorpusConfig(limit=0), r"'corpus.limit' is 0"),
        (CorpusConfig(source=Source.text), r"Missing value for config key 'corpus.path'"),
        (CorpusConfig(source=Source.text, path="x", encoding="base64"), r"'corpus.encoding' is 'base64'"),
        (StatsConfig(top_fraction=0.6), r"'stats.top_fraction' is 0.6"),
        (StatsConfig(short_range=0), r"'stats.short_range' is 0"),
        (MapsConfig(discard_ratio=1.0), r"'maps.discard_ratio' is 1.0"),
        (PlotsConfig(dpi=0), r"'plots.dpi' is 0; give the figures' dots per inch"),
        (PlotsConfig(examples=-1), r"'plots.examples' is -1"),
        (PlotsConfig(max_tokens=0), r"'plots.max_tokens' is 0"),
        (TrainerConfig(num_workers=-1), r"'trainer.num_workers' is -1"),
        (TrainerConfig(threads=0), r"'trainer.threads' is 0"),
        (TrainerConfig(devices=0), r"'trainer.devices' is 0"),
        (TrainerConfig(devices=-2), r"'trainer.devices' is -2"),
        (RunConfig(seed=-1), r"'seed' is -1"),
    ],
)
def test_each_group_checks_its_own_ranges(group, match):
    with pytest.raises(ConfigError, match=match):
        group.check()


def test_range_checks_run_when_loading():
    with pytest.raises(ConfigError, match=r"'stats.top_fraction' is 0.9"):
        load_config("csm", ["stats.top_fraction=0.9"])
    CorpusConfig().check()  # the defaults pass
    RunConfig().check(findings=["csm"])
    for devices in (-1, "auto", [0, 1], 2):  # Lightning's spellings of "all" and of a count or list
        TrainerConfig(devices=devices).check()
    with pytest.raises(ConfigError, match=r"'plots.dpi' is -1"):  # refused before any model loads, not after predict
        load_config("paper", ["plots.dpi=-1"])


def test_validate_is_given_the_finding_names():
    cfg = load_config("csm", ["findings=[csm, mine]"])  # no names given: not checked here
    assert list(cfg.findings) == ["csm", "mine"]
    with pytest.raises(ConfigError, match=r"Unknown finding 'mine' at config key 'findings\[1\]'.*Known findings: csm, mine2"):
        validate(cfg, findings=["csm", "mine2"])
    validate(cfg, findings=["csm", "mine"])
    with pytest.raises(ConfigError, match=r"'findings\[0\]'.*Did you mean 'csm'"):
        load_config("csm", ["findings=[cms]"], known_findings=["csm", "distance"])
    with pytest.raises(ConfigError, match=r"'findings' is empty; name at least one of: csm, distance"):
        load_config("csm", ["findings=[]"], known_findings=["distance", "csm"])
    validate(OmegaConf.create({"findings": ["csm"]}), findings=["csm"])  # a plain mapping is merged onto the schema


def test_config_imports_nothing_from_attnsim_but_errors_and_keys():
    imported = set()
    for path in Path(config.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }
    assert {m for m in imported if m and m.startswith("attnsim") and not m.startswith("attnsim.config")} == {
        "attnsim.errors",
        "attnsim.keys",
    }  # both import only the standard library
