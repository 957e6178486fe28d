"""Every refusal that needs no model comes before the heavy imports: each command is run in a fresh interpreter
in which torch, Lightning, transformers and MLflow cannot be imported at all, so that a check reaching for
one of them fails the test with an ImportError instead of the refusal. Each case checks the message, the
exit code 2, and that nothing was created in the folder the command ran in (no store, no run)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from attnsim.workflows.preflight import HEAVY_MODULES
from tests.helpers.paths import ROOT

BLOCKED_MAIN = f"""
import sys
class Unimportable:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY_MODULES!r}:
            raise ImportError(f"{{name}} may not be imported before the checks that need no model")
        return None
sys.meta_path.insert(0, Unimportable())
from attnsim.cli import main
sys.exit(main(sys.argv[1:]))
"""


def refused(argv, cwd):
    """(exit code, stderr) of ``attnsim ARGV`` run in ``cwd`` with the heavy libraries unimportable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), HF_HUB_OFFLINE="1")
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-c", BLOCKED_MAIN, *argv], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    return proc.returncode, proc.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = {
    "misspelt named model": (["run", "csm", "model.path=smollm"], "Did you mean model.path=smollm2?"),
    "named model in capitals": (["run", "csm", "model.path=SmolLM2"], "Did you mean model.path=smollm2?"),
    "unknown name": (["run", "csm", "model.path=not-a-model-anywhere"], "is not a named model, a model folder or a model in the Hugging Face cache"),
    "missing model folder": (["run", "csm", "model.path=./models/gone"], "Model path './models/gone' does not exist"),
    "folder without config.json": (["run", "csm", "model.path=empty"], "Directory 'empty' is not a Hugging Face model: it has no config.json"),
    "missing gguf file": (["run", "csm", "model.path=gone.gguf"], "GGUF file 'gone.gguf' does not exist"),
    "empty corpus folder": (["run", "csm", "corpus.source=text", "corpus.path=empty"], "holds no .txt files"),
    "missing corpus path": (["run", "csm", "corpus.source=text", "corpus.path=gone.txt"], "Corpus path 'gone.txt' does not exist"),
    "empty corpus file": (["run", "csm", "corpus.source=text", "corpus.path=blank.txt"], "is empty (0 bytes)"),
    "jsonl folder": (["run", "csm", "corpus.source=jsonl", "corpus.path=empty"], "is a directory; corpus.source=jsonl needs one .jsonl file"),
    "images folder without images": (["run", "vit_csm", "corpus.path=empty"], "holds no images"),
    "missing checkpoint folder": (["sweep", "csm", "--checkpoints", "gone-checkpoints"], "is neither an existing directory nor an MLflow run id"),
    "checkpoint folder without checkpoints": (["sweep", "csm", "--checkpoints", "empty"], "No checkpoint in 'empty'"),
    "sweep's missing base model": (["sweep", "csm", "--checkpoints", "empty", "--base", "smollm"], "Did you mean model.path=smollm2?"),
    "finetune's misspelt model": (["finetune", "model.path=smollm"], "Did you mean model.path=smollm2?"),
    "explorer's misspelt model": (["explore", "model.path=smollm"], "Did you mean model.path=smollm2?"),
    "store given as a path": (["run", "csm", "--uri", "runs/mlflow.db"], "is a path, not a URI: write an SQLite store as sqlite:///"),
    "file store": (["run", "csm", "--uri", "file:./mlruns"], "is an MLflow file store, which MLflow 3 refuses"),
    "in-memory sqlite store": (["run", "csm", "--uri", "sqlite://"], "is an in-memory SQLite database: every run logged there is gone"),
    "sqlite path with a tilde": (["run", "csm", "--uri", "sqlite:///~/runs/mlflow.db"], "starts its path with '~', which SQLite does not expand"),
    "empty --uri": (["run", "csm", "--uri="], "Config key 'tracking.uri' has nothing after '='"),
    "sqlite folder under a file": (["run", "csm", "--uri", "sqlite:///blank.txt/mlflow.db"], "blank.txt is a file"),
    "server where nothing listens": (["run", "csm", "--uri", "http://127.0.0.1:{port}"], "cannot be reached"),
    "database where nothing listens": (["run", "csm", "--uri", "postgresql://u@127.0.0.1:{port}/db"], "cannot be reached at 127.0.0.1:{port}"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_before_the_heavy_imports_with_nothing_created(case, tmp_path):
    argv, expected = CASES[case]
    if case == "database where nothing listens":
        pytest.importorskip("psycopg")  # without its driver the store is refused for that reason instead (tested in tests/tracking)
    (tmp_path / "empty").mkdir()
    (tmp_path / "blank.txt").write_bytes(b"")
    port = free_port()
    argv = [a.format(port=port) for a in argv]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = refused(argv, tmp_path)
    assert code == 2, err
    assert err.startswith("error: ") and expected.format(port=port) in err, err
    assert "Traceback" not in err and "may not be imported" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no mlruns/, no store file


def test_a_model_in_the_hugging_face_cache_passes_the_check(tmp_path, monkeypatch):
    """An id whose config.json is in the hub cache is accepted; one that is not, with a slash, is refused naming the cache."""
    from attnsim.capture.locate import in_hub_cache, locate_model
    from attnsim.errors import ModelError

    snapshot = tmp_path / "hub" / "models--someone--tiny-model" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "hub" / "models--someone--tiny-model" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny-model" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    assert in_hub_cache("someone/tiny-model") and not in_hub_cache("someone/other-model")
    locate_model("someone/tiny-model")
    with pytest.raises(ModelError, match="neither a local model directory nor a model in the Hugging Face cache"):
        locate_model("someone/other-model")
