"""Config composition, overrides and the errors bad config gives before anything loads."""

from __future__ import annotations

import pytest

from attnsim.config import flatten, list_experiments, load_config
from attnsim.errors import ConfigError


def test_csm_composes_groups_and_overrides():
    cfg = load_config("csm", ["corpus.limit=16", "stats.top_fraction=0.05"])
    assert cfg.model.path == "bundled"
    assert cfg.corpus.source == "bbc" and cfg.corpus.limit == 16 and cfg.corpus.seq_len == 128
    assert cfg.stats.top_fraction == 0.05
    assert cfg.tracking.experiment == "csm"
    assert flatten(cfg)["corpus.limit"] == "16"


def test_group_swap_and_missing_value(tmp_path):
    with pytest.raises(ConfigError, match=r"Missing value for config key 'corpus.path'"):
        load_config("csm", ["corpus=text"])
    cfg = load_config("csm", ["corpus=text", f"corpus.path={tmp_path}"])
    assert cfg.corpus.source == "text"


def test_misspelt_key_names_full_path_and_closest():
    with pytest.raises(ConfigError) as info:
        load_config("csm", ["corpus.seq_lne=64"])
    message = str(info.value)
    assert "'corpus.seq_lne'" in message and "Did you mean 'corpus.seq_len'" in message


def test_misspelt_top_level_key():
    with pytest.raises(ConfigError, match=r"'sed'.*Did you mean 'seed'"):
        load_config("csm", ["sed=3"])


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"corpus.limit"):
        load_config("csm", ["corpus.limit=many"])


def test_bad_choice():
    with pytest.raises(ConfigError, match=r"'corpus.source' is 'pdf'; allowed values: bbc, text, jsonl"):
        load_config("csm", ["corpus.source=pdf"])


def test_unknown_experiment_suggests():
    with pytest.raises(ConfigError, match="Did you mean 'csm'"):
        load_config("cms")


def test_interpolation_to_missing_key(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("defaults:\n  - model: minilm\n  - corpus: bbc\n  - trainer: cpu\n  - tracking: local\ntracking:\n  experiment: ${corpus.nothing}\n")
    with pytest.raises(ConfigError, match=r"tracking.experiment.*interpolation"):
        load_config(str(path))


def test_override_without_equals():
    with pytest.raises(ConfigError, match="has no '='"):
        load_config("csm", ["corpus.limit"])


def test_list_has_descriptions():
    experiments = list_experiments()
    assert "csm" in experiments and experiments["csm"]


def test_run_refuses_a_finetune_experiment_and_finetune_refuses_a_measurement():
    from attnsim.workflows.finetune import finetune
    from attnsim.workflows.run import prepare

    with pytest.raises(ConfigError, match=r"run it with `attnsim finetune finetune_bbc`"):
        prepare(load_config("finetune_bbc"))
    with pytest.raises(ConfigError, match=r"Run this one with `attnsim run csm`"):
        finetune("csm")
