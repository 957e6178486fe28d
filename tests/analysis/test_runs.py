"""Layer means a run did not log as metrics (``stats.per_layer``) are read back from its heads table
(``tables/<finding>_heads.csv``) as the nanmean over each layer's heads, by the one reader
(:mod:`attnsim.analysis.runs`) that ``attnsim report``, ``attnsim compare`` and sweeps use."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from attnsim.analysis.runs import LoggedRun, table_layer_means
from attnsim.keys import MetricKey

NAN = math.nan


class TableClient:
    """Stands in for ``MlflowClient``: serves hand-made heads tables and counts downloads."""

    def __init__(self, tables):
        self.tables, self.downloads = tables, []

    def download_artifacts(self, run_id, path, folder):
        self.downloads.append(path)
        finding = Path(path).name.removesuffix("_heads.csv")
        if finding not in self.tables:
            raise OSError(f"no artifact {path}")
        target = Path(folder) / Path(path).name
        self.tables[finding].to_csv(target, index=False)
        return str(target)


def hand_made_run():
    table = pd.DataFrame(
        {
            "layer": [0, 0, 0, 1, 1, 1],
            "head": [0, 1, 2, 0, 1, 2],
            "a": [1.0, NAN, 4.0, 0.5, 0.25, 1.5],  # layer 0: (1 + 4) / 2, the undefined head does not count
            "b": [NAN, NAN, NAN, 2.0, 2.0, 5.0],  # layer 0 undefined in every head
        }
    )
    client = TableClient({"f": table})
    metrics = {"f/a": 1.45, "f/b": 3.0, "f/c": 7.0, "f/c/L00": 6.0, "f/c/L01": 8.0, "zz_run/windows": 4.0}
    run = LoggedRun("r" * 32, "run", "FINISHED", "0", {}, {"findings": "f"}, metrics, client)
    return run, client


def test_table_fallback_is_the_nanmean_of_each_layers_heads_downloaded_once():
    run, client = hand_made_run()
    assert run.layer_values("f/a") == [2.5, 0.75]
    b = run.layer_values("f/b")
    assert math.isnan(b[0]) and b[1] == 3.0
    assert run.layer_values("f/c") == [6.0, 8.0]  # logged: read from the metrics
    assert run.layer_values("f/nothing") is None
    means = run.means()
    assert means[MetricKey("f", "a", 0)] == 2.5 and means[MetricKey("f", "a", 1)] == 0.75 and means[MetricKey("f", "c", 1)] == 8.0
    assert MetricKey("f", "b", 0) not in means and means[MetricKey("f", "b", 1)] == 3.0  # non-finite left out, as the sink does
    assert means[MetricKey("f", "a")] == 1.45 and not [k for k in means if k.finding == "zz_run"]
    assert client.downloads == ["tables/f_heads.csv"]  # once per run and finding
    assert table_layer_means(client.tables["f"], "a", layers=3)[2] != table_layer_means(client.tables["f"], "a", layers=3)[2]  # a layer the table lacks: NaN
    assert LoggedRun("r" * 32, "run", "FINISHED", "0", {}, {"findings": "f"}, {"f/a": 1.45}).layer_values("f/a") is None  # no client: metrics only


def test_layers_come_from_the_table_when_no_layer_mean_was_logged():
    run, _ = hand_made_run()
    run.metrics = {"f/a": 1.45}
    assert run.n_layers == 2 and run.layer_values("f/a") == [2.5, 0.75]


# -- a tiny real `paper` run that logs the layer means of one statistic only -------------------------

ONE = "distance/short_range_share"


@pytest.fixture(scope="module")
def paper_run(tiny_bert, tmp_path_factory):
    from attnsim.workflows.run import run

    folder = tmp_path_factory.mktemp("paper_layers")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    overrides = [
        f"model.path={tiny_bert}",
        "corpus.limit=4",
        "corpus.seq_len=32",
        "trainer.batch_size=4",
        "trainer.progress_bar=false",
        "tracking.figures=false",
        f"stats.per_layer=[{ONE}]",
        f"tracking.uri={uri}",
    ]
    return run("paper", overrides), uri, folder


def test_reader_gives_the_logged_layer_mean_and_the_table_one_alike(paper_run):
    from mlflow import MlflowClient

    from attnsim.tracking.summaries import HEADS_SECTION, LAYERS_SECTION

    result, uri, _ = paper_run
    client = MlflowClient(uri)
    logged = LoggedRun.of(client.get_run(result.run_id), client)
    series = (f"{HEADS_SECTION}/", f"{LAYERS_SECTION}/")  # the chart view's line series repeat the layer means
    layered = {k.rsplit("/", 1)[0] for k in logged.metrics if k.count("/") == 2 and not k.startswith(series)}
    assert layered == {ONE}  # only the one statistic's layer means were logged
    assert logged.metrics[f"{LAYERS_SECTION}/{ONE}"] == logged.metrics[f"{ONE}/L01"]  # the series' last step is the last layer
    assert logged.n_layers == 2
    assert logged.layer_values(ONE) == [logged.metrics[f"{ONE}/L00"], logged.metrics[f"{ONE}/L01"]]
    from_table = table_layer_means(logged.head_table("distance"), "short_range_share")  # the same layer means, read from the table
    assert from_table == pytest.approx(logged.layer_values(ONE), rel=1e-12, abs=0)
    for stat in ("csm/mean", "sentences/same_sentence_share", "separators/attention_entropy"):  # not logged per layer: from the table
        assert f"{stat}/L00" not in logged.metrics
        expected = [v for k, v in sorted(result.metrics.items()) if k.startswith(f"{stat}/L")]  # what the run computed
        assert len(expected) == 2 and logged.layer_values(stat) == pytest.approx(expected, rel=1e-12, abs=0)


def test_report_fills_every_claim_as_if_every_layer_mean_was_logged(paper_run):
    from attnsim.analysis.claims import CLAIMS, Groups
    from attnsim.analysis.report import load_runs
    from attnsim.analysis.runs import LoggedRun

    result, uri, _ = paper_run
    _, (stored,) = load_runs([result.run_id], uri)
    full = LoggedRun(
        stored.run_id, stored.name, stored.status, stored.experiment_id, stored.tags, stored.params, {**stored.metrics, **result.metrics}, stored.client
    )
    for claim in CLAIMS:
        got, want = claim.evaluate(stored, Groups.of(stored.n_layers)), claim.evaluate(full, Groups.of(full.n_layers))
        assert got.values == want.values and got.criteria == want.criteria, claim.title
        assert "not logged" not in got.values
    assert stored.layer_values("sentences/within_sentence_spread") == pytest.approx(full.layer_values("sentences/within_sentence_spread"), rel=1e-12, abs=0)


def test_compare_has_rows_for_layer_means_not_logged(paper_run):
    from attnsim.analysis.compare import compare

    result, uri, folder = paper_run
    table = compare(run_ids=[result.run_id], uri=uri, log_run=False)
    column = table.columns[0]
    for stat in ("csm/mean", "anchors/distinct_anchors", ONE):
        for layer in (0, 1):
            key = f"{stat}/L{layer:02d}"
            if math.isfinite(result.metrics.get(key, NAN)):
                assert table.loc[(stat, f"L{layer:02d}"), column] == pytest.approx(result.metrics[key], rel=1e-12, abs=0)
    computed = {k for k, v in result.metrics.items() if k.count("/") == 2 and math.isfinite(v)}
    rows = {f"{stat}/{layer}" for stat, layer in table.index if layer != "mean"}
    assert rows == computed  # a row for every layer mean the run computed, logged or not


def test_a_resumed_sweep_reads_every_layer_mean_of_a_finished_child(paper_run):
    from mlflow import MlflowClient

    from attnsim.workflows.sweep import headline_from_run

    result, uri, _ = paper_run
    client = MlflowClient(uri)
    child = client.get_run(result.run_id)
    read = headline_from_run(child, ["csm", "distance", "sentences", "anchors", "repetition", "attention_regions", "separators", "noise"], client)
    computed = {k: v for k, v in result.metrics.items() if math.isfinite(v)}  # what the sweep's parent logs for a child it measured
    assert set(read) == set(computed) and read == pytest.approx(computed, rel=1e-12, abs=0)


def test_a_local_artifact_root_is_read_in_place_with_the_tables_mlflow_downloads(paper_run):
    """The run's artifacts lie under its SQLite store's folder (``file:`` URI): read there, each table equals
    the one ``MlflowClient.download_artifacts`` gives; a table the run lacks is None either way, and a remote
    artifact root (a server's ``mlflow-artifacts:``) still downloads through the client."""
    from mlflow import MlflowClient

    from attnsim.analysis.runs import download_table

    result, uri, folder = paper_run
    client = MlflowClient(uri)
    run = client.get_run(result.run_id)
    root = run.info.artifact_uri
    assert root.startswith("file://") and str(folder) in root
    findings = LoggedRun.of(run, client).findings
    assert len(findings) >= 6
    for path in [f"tables/{f}_heads.csv" for f in findings] + ["tables/anchors_top.csv", "tables/nothing_heads.csv"]:
        downloaded = download_table(client, result.run_id, path)  # through MLflow (no artifact URI given)
        in_place = download_table(None, result.run_id, path, root)  # no client: read from the folder only
        if path == "tables/nothing_heads.csv":
            assert downloaded is None and in_place is None
            continue
        assert downloaded is not None and len(downloaded) >= 2 * 4  # a row per head (2 layers x 4 heads), anchors_top several
        pd.testing.assert_frame_equal(in_place, downloaded, check_exact=True)

    counting = TableClient({"distance": download_table(client, result.run_id, "tables/distance_heads.csv")})
    remote = download_table(counting, result.run_id, "tables/distance_heads.csv", "mlflow-artifacts:/1/x/artifacts")
    assert counting.downloads == ["tables/distance_heads.csv"] and remote is not None and len(remote) == 8
    logged = LoggedRun.of(run, counting)  # the reader of logged runs passes its artifact root: no download
    assert logged.artifact_uri == root and logged.head_table("distance") is not None and counting.downloads == ["tables/distance_heads.csv"]
