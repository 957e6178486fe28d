"""The Python API: attnsim.run / report / finetune / sweep / compare, their result objects, a light `import attnsim`."""

from __future__ import annotations

import math

import pytest
from mlflow import MlflowClient

import attnsim
from attnsim.errors import AttnsimError, ConfigError, TrackingError
from tests.helpers.runs import heavy_after

API = ["run", "report", "finetune", "sweep", "compare", "RunResult", "ReportResult", "FinetuneResult", "SweepResult"]
VERDICTS = {"holds", "does not hold", "mixed", "not measured"}


def test_dir_lists_the_api_and_import_stays_light():
    assert set(API) <= set(dir(attnsim)) and set(API) <= set(attnsim.__all__)
    _, heavy, _ = heavy_after("import attnsim\nnames = dir(attnsim)\nassert 'run' in names and 'report' in names")
    assert heavy == []


def test_names_resolve_to_the_documented_objects():
    from attnsim.analysis.compare import compare
    from attnsim.analysis.report import ReportResult, report
    from attnsim.workflows.finetune import FinetuneResult, finetune
    from attnsim.workflows.run import RunResult, run
    from attnsim.workflows.sweep import SweepResult, sweep

    assert (attnsim.run, attnsim.RunResult, attnsim.ReportResult) == (run, RunResult, ReportResult)
    assert attnsim.report.report is report
    from attnsim.analysis.listing import RunDescription, describe_run, list_runs

    assert (attnsim.list_runs, attnsim.describe_run, attnsim.RunDescription) == (list_runs, describe_run, RunDescription)
    assert (attnsim.finetune, attnsim.FinetuneResult, attnsim.sweep, attnsim.SweepResult, attnsim.compare) == (
        finetune,
        FinetuneResult,
        sweep,
        SweepResult,
        compare,
    )
    # attnsim.report is the module attnsim.report (Python binds a package attribute to its submodule), callable as report()
    import attnsim.report as module

    assert attnsim.report is module and callable(attnsim.report)
    for name in API:
        assert getattr(attnsim, name).__doc__, name
    with pytest.raises(AttributeError, match="no attribute 'runn'"):
        attnsim.runn  # noqa: B018


def test_run_refuses_overrides_given_as_one_string_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"overrides must be a list of 'KEY=VALUE' strings"):
        attnsim.run("csm", "corpus.limit=2")
    assert not (tmp_path / "mlruns").exists()


def test_report_needs_a_run_id():
    with pytest.raises(TrackingError, match="at least one run id") as caught:
        attnsim.report([])
    assert isinstance(caught.value, AttnsimError)


def test_run_returns_a_finished_run_and_report_reads_it(tiny_bert, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [
        f"model.path={tiny_bert}",
        "corpus.limit=2",
        "corpus.seq_len=32",
        "trainer.batch_size=2",
        "tracking.figures=false",
        "trainer.progress_bar=false",
        f"tracking.uri={uri}",
    ]
    result = attnsim.run("csm", overrides)
    assert isinstance(result, attnsim.RunResult)
    logged = MlflowClient(uri).get_run(result.run_id)
    assert (result.status, logged.info.status) == ("FINISHED", "FINISHED")
    assert (result.experiment_id, result.tracking_uri, result.windows) == (logged.info.experiment_id, uri, 2)
    # the run is named by the experiment and the model's short name (its folder's name; the path is its own tag)
    assert logged.data.tags["attnsim.model"] == tiny_bert.name and logged.data.tags["attnsim.model_path"] == str(tiny_bert.resolve())
    assert (result.run_name, result.experiment) == (f"csm · {tiny_bert.name}", "csm")
    assert (result.run_name, result.experiment) == (logged.info.run_name, MlflowClient(uri).get_experiment(result.experiment_id).name)
    # metrics: model and layer means as logged, no per-head values
    assert math.isclose(result.metrics["csm/mean"], logged.data.metrics["csm/mean"], rel_tol=1e-9)
    assert math.isclose(result.metrics["distance/short_range_share/L01"], logged.data.metrics["distance/short_range_share/L01"], rel_tol=1e-9)
    assert not any("/H" in key for key in result.metrics) and "csm/mean/L00" in result.metrics
    assert tuple(result.summaries["csm"].scalars["mean"].shape) == (2, 4)  # tiny model: 2 layers x 4 heads

    out = tmp_path / "report.md"
    made = attnsim.report(result.run_id, out=str(out), uri=uri)
    assert isinstance(made, attnsim.ReportResult)
    assert made.text.startswith("# Reproduction report: Halevi et al.") and made.text == out.read_text()
    assert (made.path, made.run_ids, made.tracking_uri) == (out, [result.run_id], uri)
    assert list(made.verdicts.columns) == [result.run_id] and made.verdicts.shape == (7, 1)
    assert made.verdicts.index[0] == "1. Early layers pair tokens at long range"
    assert set(made.verdicts[result.run_id]) <= VERDICTS
    assert (
        made.verdicts.loc["3. Final layers spread over one sentence, with a drop across sentence boundaries", result.run_id] == "not measured"
    )  # csm has no sentence statistics
    assert "reports/report.md" in [a.path for a in MlflowClient(uri).list_artifacts(result.run_id, "reports")]
