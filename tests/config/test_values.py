"""Values are read by the schema type of their key: text stays text, null is null, ' #' is no comment.

So ``tracking.run_name=695e0514`` is the run name ``695e0514`` (a float parser reads ``inf``), ``1e3`` stays the
text ``1e3`` where text is expected, ``checkpoint.dir=None`` is null (no folder ``./None``) and
``'tracking.run_name=ablation #2'`` keeps its ``#2``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from attnsim.cli import main
from attnsim.config import flatten, load_config, to_yaml
from attnsim.errors import ConfigError
from tests.helpers.runs import runs_of

# text that YAML reads as a number, a bool or a null, or cuts at a comment
TRICKY = ["695e0514", "1e3", "1_000", "0x10", ".5", "-7", "true", "yes", "off", "ablation #2", "[draft] x", "a: b"]


@pytest.mark.parametrize("text", TRICKY)
def test_str_keys_keep_command_line_text_exactly(text):
    experiment = [] if "#" in text else [f"tracking.experiment={text}"]  # an experiment name refuses '#' (it cuts artifact URIs)
    cfg = load_config("csm", [f"tracking.run_name={text}", *experiment, f"model.path={text}", f"tracking.tags.commit={text}", f"checkpoint.dir={text}"])
    assert cfg.tracking.run_name == text
    assert cfg.tracking.experiment == (text if experiment else "csm")
    assert cfg.model.path == text
    assert cfg.tracking.tags["commit"] == text
    assert cfg.checkpoint.dir == text
    params = flatten(cfg)
    assert params["tracking.run_name"] == text and params["tracking.tags.commit"] == text


def test_str_items_of_lists_and_maps_keep_their_text():
    cfg = load_config(
        "csm",
        ["corpus.categories=[1e3, tech, 695e0514, true]", "stats.per_head=[1e3, csm/*]", "tracking.tags={commit: 695e0514, size: 1e3, flag: on, quoted: '7'}"],
    )
    assert list(cfg.corpus.categories) == ["1e3", "tech", "695e0514", "true"]
    assert list(cfg.stats.per_head) == ["1e3", "csm/*"]
    assert dict(cfg.tracking.tags) == {"commit": "695e0514", "size": "1e3", "flag": "on", "quoted": "7"}


def _experiment(tmp_path, body: str):
    path = tmp_path / "mine.yaml"
    path.write_text("defaults:\n  - model: minilm\n  - corpus: bbc\n  - trainer: cpu\n  - tracking: local\n" + body)
    return path


def test_str_keys_keep_yaml_text_in_experiment_files(tmp_path):
    path = _experiment(
        tmp_path,
        (
            "description: 1e3\n"
            "findings: [csm]\n"
            "tracking:\n  experiment: 695e0514\n  run_name: 0x10\n  tags: {commit: 695e0514, size: 1e3, flag: true, note: 'None'}\n"
            "corpus:\n  categories: [1e3, tech]\n"
            "stats:\n  per_head: [1_000]\n"
        ),
    )
    cfg = load_config(str(path))
    assert cfg.description == "1e3"
    assert cfg.tracking.experiment == "695e0514" and cfg.tracking.run_name == "0x10"
    assert dict(cfg.tracking.tags) == {"commit": "695e0514", "size": "1e3", "flag": "true", "note": "None"}
    assert list(cfg.corpus.categories) == ["1e3", "tech"] and list(cfg.stats.per_head) == ["1_000"]


def test_str_keys_keep_yaml_text_in_config_groups(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ./configs/GROUP/OPTION.yaml comes before the bundled groups
    (tmp_path / "configs" / "tracking").mkdir(parents=True)
    (tmp_path / "configs" / "tracking" / "mine.yaml").write_text("experiment: 695e0514\nrun_name: 1e3\ntags:\n  commit: 12e4567\n")
    cfg = load_config("csm", ["tracking=mine"])
    assert (cfg.tracking.run_name, dict(cfg.tracking.tags)) == ("1e3", {"commit": "12e4567"})
    # the experiment body (tracking.experiment: csm) comes after the group
    assert cfg.tracking.experiment == "csm"


def test_other_keys_keep_yaml_typing():
    cfg = load_config("csm", ["corpus.limit=16", "stats.top_fraction=5e-2", "corpus.shuffle=false", "trainer.threads=2", "seed=0x10"])
    assert (cfg.corpus.limit, cfg.stats.top_fraction, cfg.corpus.shuffle, cfg.trainer.threads, cfg.seed) == (16, 0.05, False, 2, 16)
    with pytest.raises(ConfigError, match=r"'corpus.limit'.*'16 #x'.*could not be converted to Integer"):
        load_config("csm", ["corpus.limit=16 #x"])


def test_any_keys_are_typed_by_yaml_but_never_become_infinity(tmp_path):
    cfg = load_config("csm", ["trainer.devices=2", "model.build={model_type: vit, layer_norm_eps: 1e-12, image_size: 32, qkv_bias: true, name: 695e0514}"])
    assert cfg.trainer.devices == 2 and isinstance(cfg.trainer.devices, int)
    assert dict(cfg.model.build) == {"model_type": "vit", "layer_norm_eps": 1e-12, "image_size": 32, "qkv_bias": True, "name": "695e0514"}
    assert load_config("csm", ["trainer.devices=[0, 1]"]).trainer.devices == [0, 1]
    assert load_config("csm", ["trainer.devices=auto"]).trainer.devices == "auto"
    assert load_config("csm", ["trainer.devices=695e0514"]).trainer.devices == "695e0514"
    assert load_config("csm", ["trainer.devices=1 #x"]).trainer.devices == "1 #x"
    path = _experiment(tmp_path, "model:\n  build:\n    model_type: vit\n    eps: 1e-12\n    name: 695e0514\n    big: .inf\n")
    build = load_config(str(path)).model.build
    assert (build.eps, build.name, build.big) == (1e-12, "695e0514", float("inf"))


@pytest.mark.parametrize("spelling", ["None", "none", "null", "~"])
def test_null_spellings_are_null_on_nullable_keys(spelling):
    keys = ["checkpoint.dir", "tracking.run_name", "tracking.uri", "corpus.limit", "trainer.threads", "maps.target_class"]
    cfg = load_config("csm", [f"{key}={spelling}" for key in keys])
    params = flatten(cfg)
    shown = yaml.safe_load(to_yaml(cfg))
    for key in keys:
        assert OmegaConf.select(cfg, key) is None, key
        assert params[key] == "null", key  # params spell null as config.yaml does
        section, name = key.split(".")
        assert shown[section][name] is None and f"{name}: null" in to_yaml(cfg)


@pytest.mark.parametrize("key", ["corpus.limit", "tracking.run_name", "stats.top_fraction"])
def test_an_empty_value_on_the_command_line_is_refused_not_read_as_null(key):
    with pytest.raises(ConfigError, match=rf"Config key '{re.escape(key)}' has nothing after '=' on the command line.*{re.escape(key)}=null"):
        load_config("csm", [f"{key}="])


def test_none_in_yaml_is_null_on_nullable_keys_and_text_elsewhere(tmp_path):
    path = _experiment(
        tmp_path, "checkpoint:\n  dir: None\ncorpus:\n  limit: none\ntracking:\n  run_name: None\n  tags: {note: None}\nstats:\n  normalise: none\n"
    )
    cfg = load_config(str(path))
    assert (cfg.checkpoint.dir, cfg.corpus.limit, cfg.tracking.run_name) == (None, None, None)
    assert cfg.tracking.tags["note"] == "None"  # a tag value cannot be null: text
    assert cfg.stats.normalise == "none"  # a choice whose value is the word none


def test_none_is_text_and_null_an_error_on_keys_that_cannot_be_null():
    assert load_config("csm", ["stats.normalise=none"]).stats.normalise == "none"
    with pytest.raises(ConfigError, match=r"'tracking.experiment'"):
        load_config("csm", ["tracking.experiment=null"])


def test_hash_on_the_command_line_is_part_of_the_value():
    cfg = load_config("csm", ["tracking.run_name=ablation #2", "tracking.tags={note: 'a #b'}"])
    assert cfg.tracking.run_name == "ablation #2"
    with pytest.raises(ConfigError, match=r"'tracking.experiment' is \"news #1\", which holds '#'"):  # read whole, then refused
        load_config("csm", ["tracking.experiment=news #1"])
    assert cfg.tracking.tags["note"] == "a #b"
    with pytest.raises(ConfigError, match=r"'findings' takes a list.*'\[csm\] #x'.*not a comment.*findings=\[a, b\]"):
        load_config("csm", ["findings=[csm] #x"])


def test_list_and_map_keys_need_an_explicit_list_or_map():
    with pytest.raises(ConfigError, match=r"'findings' takes a list.*'csm'"):
        load_config("csm", ["findings=csm"])
    with pytest.raises(ConfigError, match=r"'tracking.tags' takes a map"):
        load_config("csm", ["tracking.tags=commit"])
    with pytest.raises(ConfigError, match=r"'findings' takes a list.*'\[csm'"):
        load_config("csm", ["findings=[csm"])
    with pytest.raises(ConfigError, match=r"one item of the list 'findings'.*findings=\[a, b\]"):
        load_config("csm", ["findings[0]=csm"])
    assert list(load_config("csm", ["findings=[csm, repetition]"]).findings) == ["csm", "repetition"]


def test_show_and_a_tiny_run_log_the_text_as_written(tracking_uri, tiny_bert, text_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _experiment(tmp_path, "findings: [csm]\ntracking:\n  experiment: 1e3\n  tags: {commit: 695e0514}\n")
    overrides = [
        "corpus=text",
        f"corpus.path={text_dir}",
        f"model.path={tiny_bert}",
        "corpus.limit=2",
        "corpus.seq_len=32",
        "trainer.batch_size=2",
        "tracking.figures=false",
        "plots.explorer=false",
        "plots.examples=0",
        "trainer.progress_bar=false",
        "tracking.run_name=695e0514",
        "tracking.tags.note=ablation #2",
        "checkpoint.dir=None",
    ]
    assert main(["show", str(path), *overrides]) == 0
    shown = capsys.readouterr().out
    assert "run_name: '695e0514'" in shown and "commit: '695e0514'" in shown and "experiment: '1e3'" in shown
    assert "note: 'ablation #2'" in shown and "  dir: null" in shown
    assert main(["run", str(path), *overrides]) == 0
    client, runs = runs_of(tracking_uri)
    (run,) = runs
    assert client.get_experiment(run.info.experiment_id).name == "1e3"
    assert run.info.run_name == "695e0514"
    params, tags = run.data.params, run.data.tags
    assert params["tracking.run_name"] == "695e0514" and params["tracking.experiment"] == "1e3"
    # tracking.tags are the run's tags (not params); checkpoint.* is a fine-tuning section, not logged here
    assert not any(key.startswith(("tracking.tags", "checkpoint.")) for key in params)
    assert params["trainer.threads"] == "null" and params["corpus.encoding"] == "null" and params["corpus.limit"] == "2"
    assert tags["commit"] == "695e0514" and tags["note"] == "ablation #2" and tags["mlflow.runName"] == "695e0514"
    text = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text()
    logged = yaml.safe_load(text)
    assert logged["tracking"]["run_name"] == "695e0514" and logged["tracking"]["tags"] == {"commit": "695e0514", "note": "ablation #2"}
    assert logged["checkpoint"]["dir"] is None and logged["tracking"]["experiment"] == "1e3"
    # config.yaml, read back as an experiment, is the same config
    again = tmp_path / "again.yaml"
    again.write_text(text)
    assert to_yaml(load_config(str(again))) == to_yaml(load_config(str(path), overrides))


def test_checkpoint_dir_none_is_the_default_folder_not_a_folder_named_none(tmp_path, monkeypatch):
    from attnsim.workflows.finetune import _checkpoint_dir

    monkeypatch.chdir(tmp_path)
    for spelling in ("None", "none", "null"):
        assert _checkpoint_dir(load_config("finetune_bbc", [f"checkpoint.dir={spelling}"])) is None  # ./checkpoints/<experiment>/<run id>
    assert not (tmp_path / "None").exists() and not (tmp_path / "none").exists()
