"""Which config keys a measurement run logs as params, over-long values and keys, and each run's description."""

from __future__ import annotations

import hashlib

import pytest
from mlflow import MlflowClient

import attnsim.workflows.run
from attnsim.cli import main
from attnsim.config import flatten, load_config
from attnsim.errors import TrackingError
from attnsim.findings.base import Finding
from attnsim.findings.registry import FINDINGS
from attnsim.tracking.sink import KEY_MAX, PARAM_MAX, TAG_MAX, fit_value
from attnsim.tracking.store import (
    FIGURE_KEYS,
    NOT_PARAMS,
    NOTE_TAG,
    PREDICT_TRAINER_KEYS,
    RUN_KEYS,
    SOURCE_ONLY_CORPUS_KEYS,
    Tracker,
    covers,
    measure_params,
)
from tests.helpers.runs import runs_of

TINY = ["corpus.seq_len=32", "corpus.limit=4", "trainer.progress_bar=false", "tracking.figures=false", "plots.examples=0"]


def sections(params) -> set:
    return {key.split(".", 1)[0] for key in params}


def test_measure_params_keep_only_the_sections_a_measurement_uses():
    params = measure_params(load_config("csm", ["corpus.limit=16", "tracking.tags.team=vision"]))
    assert params["corpus.limit"] == "16" and params["model.path"] == "bundled" and params["stats.top_fraction"] == "0.02"
    assert params["findings"] == "csm,distance" and params["seed"] == "0"  # csm runs the distance finding beside it
    assert {k for k in params if k.startswith("trainer.")} == {f"trainer.{k}" for k in PREDICT_TRAINER_KEYS}
    assert "trainer.max_steps" not in params and "trainer.learning_rate" not in params and "trainer.progress_bar" not in params
    assert not [k for k in params if k.startswith("checkpoint.")]
    assert not [k for k in params if k.startswith("maps.")]  # csm runs no maps finding
    assert not {"name", "description", "task"} & set(params)
    assert "tracking.experiment" in params and "tracking.tags.team" not in params  # tracking.tags are the run's tags
    assert sections(params) == {"findings", "seed", "model", "corpus", "stats", "trainer", "tracking", "plots", "capture"}
    assert len(params) <= 45  # every key of every section would be 56
    assert "plots.dpi" in params and "plots.processes" not in params  # how many processes draw changes no figure
    assert "corpus.repeat_length" not in params and "corpus.repeats" not in params  # repeated_tokens keys


# The params of `csm` and `paper` on the bundled MiniLM, written out by hand: BEFORE, the keys their statistics
# and figures read, and ADDED, keys that change what a run measures although no finding reads them: the
# capture path's keys and two trainer keys of a distributed predict.
BEFORE = {
    "corpus.categories",
    "corpus.drop_short",
    "corpus.encoding",
    "corpus.language",
    "corpus.limit",
    "corpus.min_tokens",
    "corpus.path",
    "corpus.seq_len",
    "corpus.shuffle",
    "corpus.source",
    "corpus.text_field",
    "findings",
    "model.attn_implementation",
    "model.dtype",
    "model.init",
    "model.path",
    "model.vector",
    "plots.dpi",
    "plots.examples",
    "plots.explorer",
    "plots.max_tokens",
    "seed",
    "stats.high_rule",
    "stats.include_special",
    "stats.normalise",
    "stats.per_head",
    "stats.per_layer",
    "stats.short_range",
    "stats.top_fraction",
    "stats.zscore",
    "tracking.experiment",
    "tracking.figures",
    "tracking.run_name",
    "tracking.uri",
    "trainer.accelerator",
    "trainer.batch_size",
    "trainer.devices",
    "trainer.num_workers",
    "trainer.precision",
    "trainer.threads",
}
ADDED = {"capture.path", "capture.blockwise_above", "capture.block_rows", "trainer.strategy", "trainer.num_nodes"}
EXPERIMENTS = [
    "ablation",
    "alignment",
    "anchors",
    "attention_maps",
    "attention_regions",
    "csm",
    "distance",
    "gradient_maps",
    "induction",
    "noise",
    "paper",
    "patching",
    "repetition",
    "rollout",
    "sentences",
    "separators",
    "vit_csm",
    "vit_rollout",
]


@pytest.mark.parametrize("name", ["csm", "paper"])
def test_paper_and_csm_params_are_todays_plus_the_keys_that_were_dropped(name):
    assert set(measure_params(load_config(name))) == BEFORE | ADDED


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_params_are_the_keys_the_run_and_its_findings_declare(name):
    cfg = load_config(name)
    declared = [*RUN_KEYS, *FIGURE_KEYS, *(key for finding in cfg.findings for key in FINDINGS[finding].config_keys)]
    expected = {
        key
        for key in flatten(cfg)
        if covers(declared, key)
        and not covers(NOT_PARAMS, key)
        and not (
            key.startswith("corpus.")
            and key[len("corpus.") :] in SOURCE_ONLY_CORPUS_KEYS
            and cfg.corpus.source not in SOURCE_ONLY_CORPUS_KEYS[key[len("corpus.") :]]
        )
    }
    assert set(measure_params(cfg)) == expected
    for finding in cfg.findings:  # what a finding declares it reads is logged (its source's keys aside)
        assert {key for key in flatten(cfg) if covers(FINDINGS[finding].config_keys, key)} <= set(measure_params(cfg))


def test_every_config_key_is_declared_by_the_run_a_finding_or_as_no_param():
    """A new config key must be declared where it is read, or it would be silently left out of the params."""
    every_finding = [key for name in FINDINGS for key in FINDINGS[name].config_keys]
    for key in flatten(load_config("csm")):
        if key.startswith("model.build."):  # a build run's own model config fields (model.build: {...}), read with `model`
            continue
        assert covers([*RUN_KEYS, *FIGURE_KEYS, *NOT_PARAMS, *every_finding], key), (
            f"config key {key} is read by no declaration: declare it on the finding that reads it (Finding.config_keys) or in RUN_KEYS / NOT_PARAMS"
        )
    schema = set(flatten(load_config("csm")))
    for name in FINDINGS:  # no misspelt declaration
        for key in FINDINGS[name].config_keys:
            assert any(covers([key], k) for k in schema), f"{name} declares config key {key}, which the config does not have"


def test_a_new_finding_s_declared_keys_are_logged(monkeypatch):
    class Reads(Finding):
        name = "reads"
        config_keys = ("maps.discard_ratio", "interventions.mode")

    monkeypatch.setitem(FINDINGS, "reads", Reads)
    params = measure_params(load_config("csm", ["findings=[csm,reads]", "maps.discard_ratio=0.5"]))
    assert params["maps.discard_ratio"] == "0.5" and params["interventions.mode"] == "zero"
    assert "maps.head_fusion" not in params and "interventions.heads" not in params  # only what it declares


def test_repeated_tokens_runs_log_their_corpus_keys():
    params = measure_params(load_config("induction", ["corpus.repeat_length=20"]))
    assert params["corpus.source"] == "repeated_tokens" and params["corpus.repeat_length"] == "20" and params["corpus.repeats"] == "2"


def test_plots_only_with_figures_and_maps_only_with_a_maps_finding():
    assert "plots" not in sections(measure_params(load_config("csm", ["tracking.figures=false"])))
    rollout = measure_params(load_config("rollout"))
    assert rollout["maps.head_fusion"] == "mean" and rollout["maps.flow_max_tokens"] == "64"
    assert "maps.target_class" not in rollout  # gradient maps' key
    gradient = measure_params(load_config("gradient_maps"))
    assert gradient["maps.num_labels"] == "5" and "maps.head_fusion" not in gradient
    assert "stats.band_width" in measure_params(load_config("alignment")) and "stats.band_width" not in measure_params(load_config("csm"))


def test_limits_are_mlflows():
    from mlflow.utils import validation

    assert (KEY_MAX, PARAM_MAX, TAG_MAX) == (validation.MAX_ENTITY_KEY_LENGTH, validation.MAX_PARAM_VAL_LENGTH, validation.MAX_TAG_VAL_LENGTH)


def test_fit_value_marks_a_shortened_value_with_its_hash():
    value = "x" * 50 + "y" * 7000
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    fitted = fit_value(value, 6000)
    assert len(fitted) == 6000
    assert fitted == value[: 6000 - len(f"…[sha256:{digest}]")] + f"…[sha256:{digest}]"
    assert fit_value(value[:6000], 6000) == value[:6000]  # at the limit: unchanged
    assert fit_value(value + "z", 6000) != fitted  # same head, different value: different hash


def test_long_param_and_tag_values_are_shortened_and_keys_kept_whole(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    key = "tracking.tags." + "k" * 200  # 214 characters: whole, under MLflow's 250
    tag_value, param_value = "t" * 9000, "p" * 7000
    with tracker.run("params", "long", {key: tag_value}) as sink:
        sink.log_params({key: param_value})
        run_id = sink.run_id
    run = tracker.client.get_run(run_id)
    tag_hash = hashlib.sha256(tag_value.encode()).hexdigest()[:8]
    param_hash = hashlib.sha256(param_value.encode()).hexdigest()[:8]
    assert run.data.tags[key] == "t" * (8000 - 18) + f"…[sha256:{tag_hash}]"
    assert run.data.params[key] == "p" * (6000 - 18) + f"…[sha256:{param_hash}]"


def test_a_key_over_mlflows_limit_is_refused_not_cut(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(TrackingError, match=r"has 260 characters; MLflow keys hold at most 250. attnsim never cuts a key"):
        with tracker.run("params", "long key", {"k" * 260: "v"}):
            pass
    assert tracker.client.search_runs([e.experiment_id for e in tracker.client.search_experiments()]) == []


def test_a_tag_key_over_the_limit_stops_before_the_model_loads(tiny_bert, tracking_uri, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(attnsim.workflows.run, "build_module", never)
    assert main(["run", "csm", f"model.path={tiny_bert}", *TINY, f"tracking.tags.{'k' * 251}=v"]) == 2
    assert "MLflow keys hold at most 250" in capsys.readouterr().err
    assert runs_of(tracking_uri)[1] == []


def test_measure_run_params_tags_and_description_from_the_cli(tiny_bert, tracking_uri):
    long_tag = "n" * 8500
    argv = ["run", "csm", f"model.path={tiny_bert}", *TINY, f"tracking.tags.long_note={long_tag}"]
    assert main(argv) == 0
    _, (run,) = runs_of(tracking_uri)
    params, tags = run.data.params, run.data.tags
    assert params["corpus.limit"] == "4" and params["trainer.batch_size"] == "32" and params["model.path"] == str(tiny_bert)
    assert "trainer.max_steps" not in params and not [k for k in params if k.startswith("checkpoint.")]
    assert "plots.dpi" not in params  # figures off
    assert set(params) == set(measure_params(load_config("csm", [f"model.path={tiny_bert}", *TINY])))  # the declared keys, logged
    assert tags["long_note"] == "n" * (8000 - 18) + f"…[sha256:{hashlib.sha256(long_tag.encode()).hexdigest()[:8]}]"
    description = load_config("csm").description
    command = "attnsim run csm model.path=" + str(tiny_bert) + " " + " ".join(TINY) + f" tracking.tags.long_note={long_tag}"
    # the description too is a tag: over 8,000 characters here (the long tag is on the command line), so shortened;
    # the way to the run's tables and its headline numbers come first (attnsim.tracking.note), then how it was started
    note, started = tags[NOTE_TAG], fit_value(f"{description}\n\nCommand line: `{command}`", TAG_MAX)
    assert note.startswith("**Read this run:** [tables](#/experiments/") and len(note) == TAG_MAX
    assert f"\n\n{started[:1000]}" in note and note.endswith("]") and "…[sha256:" in note[-20:]


def test_description_names_the_python_call(tiny_bert, tracking_uri):
    overrides = [f"model.path={tiny_bert}", *TINY]
    result = attnsim.workflows.run.run("csm", overrides)
    note = MlflowClient(tracking_uri).get_run(result.run_id).data.tags[NOTE_TAG]
    description = load_config("csm").description
    assert f"\n\n{description}\n\nStarted from the Python API: `attnsim.run('csm', {overrides!r})` (process: `" in note
