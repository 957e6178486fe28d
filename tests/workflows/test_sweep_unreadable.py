"""A sweep never stops at one bad checkpoint: a checkpoint that cannot be loaded (no weights file, a missing shard,
a tensor missing from its file) is recorded as unreadable with the reason, the others are measured, the parent ends
FINISHED and `attnsim sweep` exits 3; when nothing can be read the parent ends FAILED and the sweep exits 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient
from safetensors.torch import load_file, save_file

from attnsim.cli import EXIT_UNREADABLE, main
from tests.helpers.models import save_tiny_model
from tests.helpers.runs import SWEEP


def _drop_tensor(folder: Path) -> str:
    """Rewrite ``folder``'s weights without one query weight (the file stays whole); return the key dropped."""
    weights = load_file(str(folder / "model.safetensors"))
    gone = next(k for k in sorted(weights) if k.endswith("layer.1.attention.self.query.weight"))
    save_file({k: v for k, v in weights.items() if k != gone}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return gone


def _shard(folder: Path) -> Path:
    """Save ``folder``'s model again as a sharded set and delete its second shard; return the shard deleted."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    model.save_pretrained(folder, max_shard_size="1MB")
    shard = sorted(folder.glob("model-*-of-*.safetensors"))[1]
    shard.unlink()
    return shard


def _sweep_runs(client: MlflowClient):
    """(the sweep parents, the children by step) of experiment csm."""
    eid = client.get_experiment_by_name("csm").experiment_id
    runs = client.search_runs([eid])
    parents = [r for r in runs if r.data.tags.get("attnsim.kind") == "sweep"]
    return parents, {int(r.data.tags["attnsim.sweep_step"]): r for r in runs if "mlflow.parentRunId" in r.data.tags}


def test_unreadable_checkpoints_are_recorded_and_the_others_measured(checkpoints, tracking_uri, tmp_path, capsys):
    for step, seed in ((6, 3), (8, 4)):
        save_tiny_model(checkpoints / f"step-{step:06d}", seed=seed)
    good = tmp_path / "good-4"
    shutil.copytree(checkpoints / "step-000004", good)
    (checkpoints / "step-000004" / "model.safetensors").unlink()  # config.json, tokenizer, no weights
    shard = _shard(checkpoints / "step-000006")  # one shard of a sharded set gone
    gone = _drop_tensor(checkpoints / "step-000008")  # whole file, one tensor missing: fails when the weights load

    assert main(["sweep", "csm", "--checkpoints", str(checkpoints), *SWEEP]) == EXIT_UNREADABLE == 3
    out = capsys.readouterr().out
    assert "5 children: 2 measured now, 0 already finished, 3 unreadable (skipped; see the status column)" in out
    client = MlflowClient(tracking_uri)
    (parent,), children = _sweep_runs(client)
    assert parent.info.status == "FINISHED" and parent.data.tags["attnsim.sweep_unreadable_count"] == "3"
    why = parent.data.tags["attnsim.sweep_unreadable"]
    assert "step 4: Model folder" in why and "no weights file" in why
    assert f"step 6: The sharded weights of '{checkpoints / 'step-000006'}' are incomplete" in why and shard.name in why
    assert "step 8: The weights in" in why and gone in why
    assert sorted(children) == [0, 2] and {c.info.status for c in children.values()} == {"FINISHED"}  # no run of 4, 6 or 8 at all
    assert sorted(m.step for m in client.get_metric_history(parent.info.run_id, "csm/mean")) == [0, 2]
    table = pd.read_csv(client.download_artifacts(parent.info.run_id, "sweep/runs.csv", str(tmp_path)))
    status = dict(zip(table["step"], table["status"]))
    assert [status[s] for s in (0, 2)] == ["measured", "measured"]
    assert status[4].startswith("unreadable: Model folder") and status[6].startswith("unreadable: The sharded weights")
    assert status[8].startswith("unreadable: The weights in") and gone in status[8]

    # the checkpoints repaired, the same sweep measures them under the same parent; nothing is unreadable any more
    shutil.rmtree(checkpoints / "step-000004")
    shutil.copytree(good, checkpoints / "step-000004")
    for folder in ("step-000006", "step-000008"):
        shutil.rmtree(checkpoints / folder)
    save_tiny_model(checkpoints / "step-000006", seed=3)
    save_tiny_model(checkpoints / "step-000008", seed=4)
    assert main(["sweep", "csm", "--checkpoints", str(checkpoints), *SWEEP]) == 0
    assert "3 measured now, 2 already finished" in capsys.readouterr().out
    (again,), children = _sweep_runs(client)
    assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"
    assert again.data.tags["attnsim.sweep_unreadable_count"] == "0" and "attnsim.sweep_unreadable" not in again.data.tags
    assert sorted(children) == [0, 2, 4, 6, 8]


def test_a_sweep_with_nothing_readable_ends_failed(checkpoints, tracking_uri, tmp_path, capsys):
    base = tmp_path / "base"
    save_tiny_model(base)
    _drop_tensor(base)  # step 0 reads its config and tokenizer (the windows are built), then its weights fail to load
    for folder in ("step-000002", "step-000004"):
        (checkpoints / folder / "model.safetensors").unlink()
    assert main(["sweep", "csm", "--checkpoints", str(checkpoints), "--base", str(base), *SWEEP]) == 2
    err = capsys.readouterr().err
    assert "error: No checkpoint of the sweep could be read (3 unreadable" in err and "step 0: The weights in" in err and "step 4: Model folder" in err
    client = MlflowClient(tracking_uri)
    (parent,), children = _sweep_runs(client)
    assert parent.info.status == "FAILED" and children == {}
    assert parent.data.tags["attnsim.sweep_unreadable_count"] == "3"
    table = pd.read_csv(client.download_artifacts(parent.info.run_id, "sweep/runs.csv", str(tmp_path)))
    assert list(table["step"]) == [0, 2, 4] and all(s.startswith("unreadable: ") for s in table["status"])


def test_the_sweep_help_documents_the_exit_status(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 every checkpoint measured" in text and "3 the sweep finished but some checkpoints could not be read" in text
    assert "2 bad input, or no checkpoint could be read" in text
