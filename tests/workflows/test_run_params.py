"""Which config keys a measurement run logs as params, over-long values and keys, and each run's description."""

from __future__ import annotations

import hashlib

import pytest
from mlflow import MlflowClient

import attnsim.workflows.run
from attnsim.cli import main
from attnsim.config import load_config
from attnsim.errors import TrackingError
from attnsim.tracking.sink import KEY_MAX, PARAM_MAX, TAG_MAX, fit_value
from attnsim.tracking.store import NOTE_TAG, PREDICT_TRAINER_KEYS, Tracker, measure_params
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
    assert sections(params) == {"findings", "seed", "model", "corpus", "stats", "trainer", "tracking", "plots"}
    assert len(params) <= 40  # was 56: every key of every section
    assert "plots.dpi" in params and "plots.processes" not in params  # how many processes draw changes no figure
    assert "corpus.repeat_length" not in params and "corpus.repeats" not in params  # repeated_tokens keys


def test_repeated_tokens_runs_log_their_corpus_keys():
    params = measure_params(load_config("induction", ["corpus.repeat_length=20"]))
    assert params["corpus.source"] == "repeated_tokens" and params["corpus.repeat_length"] == "20" and params["corpus.repeats"] == "2"


def test_plots_only_with_figures_and_maps_only_with_a_maps_finding():
    assert "plots" not in sections(measure_params(load_config("csm", ["tracking.figures=false"])))
    rollout = measure_params(load_config("rollout"))
    assert rollout["maps.head_fusion"] == "mean" and rollout["maps.flow_max_tokens"] == "64"
    assert "maps" in sections(measure_params(load_config("gradient_maps")))


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
    assert tags["long_note"] == "n" * (8000 - 18) + f"…[sha256:{hashlib.sha256(long_tag.encode()).hexdigest()[:8]}]"
    description = load_config("csm").description
    command = "attnsim run csm model.path=" + str(tiny_bert) + " " + " ".join(TINY) + f" tracking.tags.long_note={long_tag}"
    # the description too is a tag: over 8,000 characters here (the long tag is on the command line), so shortened
    assert tags[NOTE_TAG] == fit_value(f"{description}\n\nCommand line: `{command}`", TAG_MAX)
    assert tags[NOTE_TAG].startswith(f"{description}\n\nCommand line: `attnsim run csm model.path=")


def test_description_names_the_python_call(tiny_bert, tracking_uri):
    overrides = [f"model.path={tiny_bert}", *TINY]
    result = attnsim.workflows.run.run("csm", overrides)
    note = MlflowClient(tracking_uri).get_run(result.run_id).data.tags[NOTE_TAG]
    description = load_config("csm").description
    assert note.startswith(f"{description}\n\nStarted from the Python API: `attnsim.run('csm', {overrides!r})` (process: `")
