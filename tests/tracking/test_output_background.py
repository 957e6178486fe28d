"""Figures are encoded and uploaded on a background thread: the run waits
for them before it ends, and an error there ends the run FAILED with everything else it measured logged."""

from __future__ import annotations

import threading

import pytest

from attnsim.keys import Tag
from attnsim.tracking.sink import RunSink, run_key
from tests.helpers.runs import runs_of


def _overrides(tiny_bert, uri):
    return [
        f"model.path={tiny_bert}",
        "corpus.limit=2",
        "corpus.seq_len=24",
        "trainer.batch_size=2",
        "trainer.progress_bar=false",
        "plots.examples=1",
        "plots.explorer=false",
        f"tracking.uri={uri}",
    ]


def test_every_figure_is_uploaded_before_the_run_ends(tiny_bert, tmp_path):
    from attnsim.workflows.run import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run("csm", _overrides(tiny_bert, uri))
    client, (logged,) = runs_of(uri)
    assert logged.info.status == "FINISHED" and result.timings["figures"] > 0
    figures = {a.path for a in client.list_artifacts(result.run_id, "figures/csm")}
    assert {"figures/csm/heads.png", "figures/csm/mean_csm.png", "figures/csm/distance_profiles.png"} <= figures
    assert not [t for t in threading.enumerate() if t.name.startswith("attnsim-figures")]  # the writer thread is joined


def test_an_upload_error_in_the_background_fails_the_run_with_the_rest_logged(tiny_bert, tmp_path, monkeypatch):
    from attnsim.workflows.run import run

    def broken(self, data, artifact_file):
        raise OSError(f"No space left on device while writing {artifact_file}")

    monkeypatch.setattr(RunSink, "_write_file", broken)  # every figure's upload, drawn here or in a helper process
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(OSError, match="No space left on device while writing figures/"):
        run("csm", _overrides(tiny_bert, uri))
    client, (logged,) = runs_of(uri)
    assert logged.info.status == "FAILED" and "No space left on device" in logged.data.tags[Tag.ERROR.value]
    assert "csm/mean" in logged.data.metrics  # the statistics were summarised and sent before the run ended
    assert {"tables/csm_heads.csv", "tables/csm_heads.json"} <= {a.path for a in client.list_artifacts(logged.info.run_id, "tables")}
    assert run_key("time_total") not in logged.data.metrics  # it failed before its timings
    assert not [t for t in threading.enumerate() if t.name.startswith("attnsim-figures")]
