"""Bad input stops early with a clear message; faults end runs FAILED/KILLED with what was measured kept."""

from __future__ import annotations

import json
import logging
import math
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from attnsim.cli import main
from attnsim.config import load_config
from attnsim.errors import ConfigError
from attnsim.findings import registry
from attnsim.findings.base import Finding, Summary
from attnsim.tracking.store import Tracker
from attnsim.workflows.run import run
from tests.helpers.runs import runs_of, slow_run

TINY = ["corpus=text", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0"]


# -- config ------------------------------------------------------------------------
def test_misspelt_key_in_experiment_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("defaults:\n  - model: minilm\n  - corpus: bbc\n  - trainer: cpu\n  - tracking: local\nstats:\n  top_fracton: 0.1\n")
    with pytest.raises(ConfigError, match=rf"'stats.top_fracton' in {path}.*Did you mean 'stats.top_fraction'"):
        load_config(str(path))


def test_misspelt_group_in_defaults_list(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("defaults:\n  - modle: minilm\n")
    with pytest.raises(ConfigError, match=r"Unknown config group 'modle'.*Did you mean 'model'"):
        load_config(str(path))


def test_misspelt_entry_inside_findings_list():
    with pytest.raises(ConfigError, match=r"'findings\[0\]'.*Did you mean 'csm'"):
        load_config("csm", ["findings=[cms]"], known_findings=registry.FINDINGS)


def test_wrong_type_names_key_and_type():
    with pytest.raises(ConfigError, match=r"'stats.top_fraction'.*could not be converted to Float"):
        load_config("csm", ["stats.top_fraction=lots"])


# -- text ---------------------------------------------------------------------------
def test_degenerate_texts_give_finite_statistics(tracking_uri, tiny_bert, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    texts = [
        "",
        "   \n\t ",
        "\u200b\u200c\u200d\ufeff",
        "!!! ... ,,, ??? ;;; --- !!!",
        "Bell\x07 and nul\x00 inside. Then a tab\tand more words follow here.",
        "A normal sentence sits here. Another one follows it.",
    ]
    for i, text in enumerate(texts):
        (folder / f"{i}.txt").write_text(text)
    result = run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={folder}", "corpus.min_tokens=2"])
    client, runs = runs_of(tracking_uri)
    assert runs[0].info.status == "FINISHED"
    assert result.windows == 3  # the punctuation, control-character and normal documents
    assert all(math.isfinite(v) for v in runs[0].data.metrics.values())
    assert "zz_run/skipped_nonfinite" not in runs[0].data.metrics


def test_window_larger_than_model_is_config_error(tiny_bert):
    with pytest.raises(ConfigError, match=r"corpus.seq_len=300 is larger than the 256 tokens"):
        run("csm", [f"model.path={tiny_bert}", "corpus.seq_len=300"])


# -- models ------------------------------------------------------------------------
def test_sdpa_is_switched_to_eager_with_tag(tracking_uri, tiny_bert, text_dir, monkeypatch, caplog):
    class NeedsAttention(Finding):
        name = "needs_attention"
        statistics = ("attention_max",)
        needs_attention = True

        def update(self, view):
            assert view.attention is not None and view.attention.shape[-1] == 32
            self.windows += view.batch_size
            self.max = float(view.attention.max())

        def summarise(self):
            return Summary(self.name, {"attention_max": torch.full((self.n_layers, self.n_heads), self.max)}, windows=self.windows)

    monkeypatch.setitem(registry.FINDINGS, "needs_attention", NeedsAttention)
    with caplog.at_level(logging.WARNING):
        run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "model.attn_implementation=sdpa", "findings=[csm,needs_attention]"])
    _, runs = runs_of(tracking_uri)
    tags = runs[0].data.tags
    assert tags["attnsim.attn_implementation_switched"] == "sdpa->eager"
    assert tags["attnsim.attn_implementation"] == "eager"
    assert "switching attn_implementation sdpa -> eager" in caplog.text
    assert 0 < runs[0].data.metrics["needs_attention/attention_max"] <= 1


def test_unsupported_architecture_refused_before_run(tracking_uri, tmp_path, capsys):
    from transformers import GPTJConfig  # a decoder family attnsim does not capture

    GPTJConfig(n_layer=1, n_head=2, n_embd=8).save_pretrained(tmp_path / "gptj")
    assert main(["run", "csm", f"model.path={tmp_path / 'gptj'}"]) == 2
    assert "cannot capture attention heads of model type 'gptj'. Supported model types:" in capsys.readouterr().err
    assert runs_of(tracking_uri)[1] == []


# -- numbers --------------------------------------------------------------------------
def test_nonfinite_values_skipped_warned_once_and_counted(tracking_uri, caplog):
    tracker = Tracker()
    with caplog.at_level(logging.WARNING):
        with tracker.run("guard") as sink:
            sink.log_metrics({"x/nan": float("nan"), "x/ok": 1.5, "x/inf": float("inf")})
            sink.log_metrics({"x/nan": float("nan")})
    run_ = tracker.client.get_run(sink.run_id)
    assert run_.data.metrics == {"x/ok": 1.5, "zz_run/skipped_nonfinite": 3.0}
    assert run_.data.tags["attnsim.skipped_nonfinite"] == "x/inf,x/nan"  # which keys were undefined
    assert caplog.text.count("metric x/nan") == 1


def test_metric_names_made_valid_and_collisions_refused(tracking_uri):
    tracker = Tracker()
    with pytest.raises(ValueError, match=r"'x/a\(b\)' and 'x/a_b_' both become the key 'x/a_b_'"):
        with tracker.run("keys") as sink:
            sink.check_keys(["x/a(b)", "x/a_b_"])  # what a run does at its start, before measuring
            sink.log_metrics({"x/a(b)": 1.0})
    assert tracker.client.get_run(sink.run_id).info.status == "FAILED"
    assert tracker.client.get_run(sink.run_id).data.metrics == {}


# -- faults -------------------------------------------------------------------------------
class Exploding(Finding):
    """A finding whose update fails on the second batch."""

    name = "exploding"
    statistics = ("count",)
    error_type: type = RuntimeError

    def update(self, view):
        if self.windows >= 2:
            raise self.error_type("statistic exploded")
        self.windows += view.batch_size

    def summarise(self):
        return Summary(self.name, {"count": torch.full((self.n_layers, self.n_heads), float(self.windows))}, windows=self.windows)


def test_failing_statistic_keeps_other_results(tracking_uri, tiny_bert, text_dir, monkeypatch):
    monkeypatch.setitem(registry.FINDINGS, "exploding", Exploding)
    with pytest.raises(RuntimeError, match="statistic exploded"):
        run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "trainer.batch_size=2", "findings=[csm,exploding]"])
    _, runs = runs_of(tracking_uri)
    r = runs[0]
    assert r.info.status == "FAILED"
    assert r.data.tags["attnsim.failed_findings"] == "exploding" and r.data.tags["attnsim.partial"] == "true"
    assert "statistic exploded" in r.data.tags["attnsim.error"]
    assert "csm/mean/L01/H03" in r.data.metrics  # the other finding saw every batch
    assert not any(k.startswith("exploding/") for k in r.data.metrics)


def test_a_failing_summary_keeps_the_summaries_made_before_it(tracking_uri, tiny_bert, text_dir, monkeypatch):
    """Summaries are all made before anything is logged (the logging runs beside the figure helpers); one that
    raises still leaves the earlier findings' metrics and tables in the FAILED run."""

    class FailsToSummarise(Exploding):
        name = "fails_to_summarise"

        def update(self, view):
            self.windows += view.batch_size

        def summarise(self):
            raise ValueError("summary exploded")

    monkeypatch.setitem(registry.FINDINGS, "fails_to_summarise", FailsToSummarise)
    with pytest.raises(ValueError, match="summary exploded"):
        run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "findings=[csm,fails_to_summarise]"])
    client, runs = runs_of(tracking_uri)
    r = runs[0]
    assert r.info.status == "FAILED" and "summary exploded" in r.data.tags["attnsim.error"]
    assert "csm/mean/L01/H03" in r.data.metrics and r.data.metrics["zz_run/windows"] > 0
    assert not any(k.startswith("fails_to_summarise/") for k in r.data.metrics)
    assert "tables/csm_heads.csv" in [a.path for a in client.list_artifacts(r.info.run_id, "tables")]


def test_ctrl_c_during_predict_ends_killed_with_partial_statistics(tracking_uri, tiny_bert, text_dir, monkeypatch):
    class Interrupting(Exploding):
        name = "interrupting"
        error_type = KeyboardInterrupt

    monkeypatch.setitem(registry.FINDINGS, "interrupting", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "trainer.batch_size=2", "findings=[interrupting,csm]"])
    _, runs = runs_of(tracking_uri)
    r = runs[0]
    assert r.info.status == "KILLED"
    assert r.data.tags["attnsim.partial"] == "true"
    assert r.data.metrics["zz_run/windows"] == 2  # one batch of two windows was folded in
    assert "csm/mean" in r.data.metrics and r.data.metrics["interrupting/count"] == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_during_predict_ends_run_with_partial_statistics(tracking_uri, tiny_bert, text_dir, tmp_path):
    proc = slow_run(tracking_uri, tiny_bert, text_dir, tmp_path)
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("batch")
        if seen == 3:
            proc.send_signal(signal.SIGTERM)
            break
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 143, output  # 128 + SIGTERM, as a shell reports it
    _, runs = runs_of(tracking_uri)
    r = runs[0]
    assert r.info.status in ("KILLED", "FAILED"), output
    assert r.data.tags.get("attnsim.partial") == "true", output
    assert 2 <= r.data.metrics["zz_run/windows"] < 20
    assert "slow/mean/L00" in r.data.metrics


def test_unreachable_tracking_server_fails_before_model_loads(tiny_bert, text_dir, capsys, monkeypatch):
    import attnsim.workflows.run as runner

    monkeypatch.setattr(runner, "build_module", lambda *a, **k: pytest.fail("model loaded before the store was checked"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    code = main(["run", "csm", f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", f"tracking.uri=http://127.0.0.1:{port}"])
    assert code == 2
    assert f"tracking server http://127.0.0.1:{port} cannot be reached" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_store_stays_readable_by_mlflow_server_after_a_failure(tracking_uri, tiny_bert, text_dir, monkeypatch):
    monkeypatch.setitem(registry.FINDINGS, "exploding", Exploding)
    with pytest.raises(RuntimeError):
        run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "trainer.batch_size=2", "findings=[csm,exploding]"])
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    pytest.fail("mlflow server did not start")
                time.sleep(0.5)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search",
            data=json.dumps({"max_results": 10}).encode(),
            headers={"Content-Type": "application/json"},
        )
        experiments = json.load(urllib.request.urlopen(request, timeout=10))["experiments"]
        ids = [e["experiment_id"] for e in experiments]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=json.dumps({"experiment_ids": ids}).encode(),
            headers={"Content-Type": "application/json"},
        )
        runs = json.load(urllib.request.urlopen(request, timeout=10))["runs"]
        assert [r["info"]["status"] for r in runs] == ["FAILED"]
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- determinism -----------------------------------------------------------------------------
def test_same_config_and_seed_give_identical_metrics(tracking_uri, tiny_bert, text_dir):
    args = [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "seed=3"]
    first, second = run("csm", args), run("csm", args)
    client, _ = runs_of(tracking_uri)
    a = {k: v for k, v in client.get_run(first.run_id).data.metrics.items() if not k.startswith("zz_run/time_")}
    b = {k: v for k, v in client.get_run(second.run_id).data.metrics.items() if not k.startswith("zz_run/time_")}
    assert a == b and len(a) > 40  # 8 statistics x (1 + 2 layers) + 3 headline x 8 heads + windows


def test_bad_tracking_uris_are_clear_errors(tmp_path):
    from attnsim.errors import TrackingError

    with pytest.raises(TrackingError, match="file store, which MLflow 3 refuses"):
        Tracker("./mlruns")
    with pytest.raises(TrackingError, match="file store"):
        Tracker(f"file://{tmp_path}")
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(TrackingError, match="Give a writable path"):
        Tracker(f"sqlite:///{blocker}/sub/mlflow.db")
    with pytest.raises(TrackingError, match="MLflow cannot use the tracking store 'foo://bar'"):
        Tracker("foo://bar").check()
    with pytest.raises(TrackingError, match=r"Tracking store '.*mlflow.db' is a path, not a URI: write an SQLite store as sqlite:///"):
        Tracker(str(tmp_path / "mlflow.db"))


def test_a_database_store_that_does_not_answer_is_refused_at_once_not_after_mlflows_retries(tmp_path):
    """MLflow retries a refused database connection for about 100 s; the tracker probes the port (or the
    PostgreSQL Unix socket) first and says which, with the password hidden."""
    import time

    from attnsim.errors import TrackingError
    from tests.helpers.servers import free_port

    port = free_port()  # nothing listens there
    started = time.perf_counter()
    with pytest.raises(TrackingError) as refused:
        Tracker(f"postgresql://bob:secret@127.0.0.1:{port}/mlflow")
    assert time.perf_counter() - started < 10
    message = str(refused.value)
    assert f"The postgresql database of the tracking store postgresql://bob:***@127.0.0.1:{port}/mlflow cannot be reached at 127.0.0.1:{port}" in message
    assert "secret" not in message and "pg_ctl start" in message
    with pytest.raises(TrackingError, match=rf"cannot be reached at {tmp_path}/.s.PGSQL.5432 "):
        Tracker(f"postgresql:///mlflow?host={tmp_path}")  # a Unix socket folder where no server listens


def test_gpu_accelerator_without_gpu_is_config_error(tiny_bert, text_dir, monkeypatch):
    import attnsim.workflows.run as runner

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runner, "build_module", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        run("csm", [f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "trainer.accelerator=gpu"])


def test_binary_files_are_refused_or_skipped(tmp_path, caplog):
    from attnsim.data.sources import read_documents
    from attnsim.errors import CorpusError

    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(CorpusError, match="holds binary data"):
        read_documents("text", str(blob))
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_bytes(bytes(range(256)))
    (folder / "b.txt").write_text("Real text. Two sentences.")
    with caplog.at_level(logging.WARNING):
        docs = read_documents("text", str(folder))
    assert [d.doc_id for d in docs] == ["b.txt"] and "skipped 1 .txt file(s)" in caplog.text


def test_a_dataset_created_by_another_run_meanwhile_is_linked_on_the_second_attempt():
    """MLflow's SQL store fails the later of two simultaneous inserts of one dataset (unique key: an IntegrityError
    wrapped in MlflowException); the sink logs the inputs once more. Any other error is raised at once."""
    import sqlalchemy
    from mlflow.exceptions import MlflowException

    from attnsim.tracking.sink import RunSink

    class Client:
        def __init__(self, errors):
            self.errors, self.calls = list(errors), 0

        def log_inputs(self, run_id, inputs):  # noqa: ANN001
            self.calls += 1
            if self.errors:
                error = self.errors.pop(0)
                try:
                    raise error
                except Exception as cause:  # noqa: BLE001
                    raise MlflowException(str(cause)) from cause

    race = Client([sqlalchemy.exc.IntegrityError("INSERT INTO datasets", {}, Exception("UNIQUE constraint failed"))])
    RunSink(race, "r1").log_inputs(["a dataset"])
    assert race.calls == 2
    other = Client([ValueError("disk full")])
    with pytest.raises(MlflowException, match="disk full"):
        RunSink(other, "r1").log_inputs(["a dataset"])
    assert other.calls == 1


def test_ctrl_c_says_which_run_it_ended_or_that_none_existed(tiny_bert, text_dir, tracking_uri, monkeypatch, capsys):
    import attnsim.workflows.run as runner
    from attnsim.tracking import store

    monkeypatch.setattr(store, "KILLED_RUNS", [])
    common = ["run", "csm", f"model.path={tiny_bert}", "corpus=text", f"corpus.path={text_dir}", "corpus.seq_len=16", "tracking.figures=false"]

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    prepare = runner.prepare
    monkeypatch.setattr(runner, "prepare", interrupt)  # before any run is created
    assert main(common) == 130
    assert "interrupted before any run was created: nothing was logged" in capsys.readouterr().err
    monkeypatch.setattr(runner, "prepare", prepare)
    monkeypatch.setattr(runner, "predict_loop", interrupt)  # inside the run
    assert main(common) == 130
    client, runs = runs_of(tracking_uri)
    assert [r.info.status for r in runs] == ["KILLED"]
    assert f"interrupted: the run {runs[0].info.run_id} was ended as KILLED" in capsys.readouterr().err
