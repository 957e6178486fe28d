"""Every bundled experiment composes and validates; experiments no longer repeat what the base holds.

An experiment YAML holds only what differs from the base: not the defaults list, not its own name.
"""

from __future__ import annotations

import pytest
import yaml

from attnsim.config import BASE, list_experiments, load_config, package_dir, to_yaml
from attnsim.errors import ConfigError
from attnsim.findings.registry import FINDINGS

FOLDER = package_dir("experiments")
NAMES = sorted(p.stem for p in FOLDER.glob("*.yaml") if not p.stem.startswith("_"))
BASE_DEFAULTS = [{"model": "minilm"}, {"corpus": "bbc"}, {"trainer": "cpu"}, {"tracking": "local"}]


def test_the_bundled_experiments_are_the_listed_ones():
    assert len(NAMES) >= 19 and {"csm", "paper", "induction", "alignment", "ablation", "patching"} <= set(NAMES)  # other issues append experiments too
    assert set(NAMES) <= set(list_experiments())
    assert BASE not in list_experiments() and (FOLDER / f"{BASE}.yaml").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_composes_and_validates(name):
    cfg = load_config(name, known_findings=FINDINGS)
    assert cfg.name == name
    assert cfg.tracking.experiment == ("finetune" if name == "finetune_bbc" else name)
    assert cfg.description and set(cfg.findings) <= set(FINDINGS)
    assert str(cfg.task) == ("finetune" if name == "finetune_bbc" else "measure")
    assert yaml.safe_load(to_yaml(cfg))["name"] == name  # shows as plain YAML (choices as their text)


@pytest.mark.parametrize("name", NAMES)
def test_experiments_hold_only_their_own_keys(name):
    body = yaml.safe_load((FOLDER / f"{name}.yaml").read_text())
    assert "name" not in body
    assert body.get("tracking", {}).get("experiment") != name  # the base names it ${name}
    repeated = [entry for entry in body.get("defaults", []) if entry in BASE_DEFAULTS]
    assert not repeated, f"{name} repeats the base's defaults {repeated}"


def test_base_sets_the_defaults_once_and_the_experiment_name():
    base = yaml.safe_load((FOLDER / f"{BASE}.yaml").read_text())
    assert base["defaults"] == BASE_DEFAULTS
    assert base["tracking"]["experiment"] == "${name}"


def test_own_defaults_swap_groups_of_the_base():
    cfg = load_config("vit_csm")
    assert (cfg.model.path, str(cfg.corpus.source), str(cfg.trainer.accelerator)) == ("build", "images", "cpu")


def test_an_experiment_file_elsewhere_gets_the_base(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("description: mine\nfindings: [repetition]\ncorpus:\n  limit: 8\n")
    cfg = load_config(str(path), known_findings=FINDINGS)
    assert (cfg.name, cfg.tracking.experiment, cfg.model.path, str(cfg.corpus.source), cfg.corpus.limit) == ("mine", "mine", "bundled", "bbc", 8)
    assert load_config(str(path), ["name=other"]).tracking.experiment == "other"
    path.write_text("defaults:\n  - corpus: text\nfindings: [csm]\n")
    with pytest.raises(ConfigError, match=r"Missing value for config key 'corpus.path'"):
        load_config(str(path))


def test_underscore_files_are_not_listed(tmp_path, monkeypatch):
    (tmp_path / "_shared.yaml").write_text("description: not an experiment\n")
    (tmp_path / "visible.yaml").write_text("description: an experiment\n")
    monkeypatch.setenv("ATTNSIM_EXPERIMENTS", str(tmp_path))
    listed = list_experiments()
    assert listed["visible"] == "an experiment" and "_shared" not in listed


def test_csm_experiment_is_composed_from_the_distance_finding():
    assert list(load_config("csm").findings) == ["csm", "distance"]
    assert list(load_config("vit_csm").findings) == ["csm", "distance"]
    paper = list(load_config("paper").findings)
    assert paper.count("distance") == 1 and "csm" in paper
