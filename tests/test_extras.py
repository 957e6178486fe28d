"""Pieces only some uses need are extras of the package (pyproject.toml): ``attnsim[server]`` (psycopg, the
PostgreSQL driver), ``attnsim[vision]`` (scikit-image, the ViT experiments' default images), ``attnsim[gguf]``
(gguf and accelerate, GGUF models) and ``attnsim[cjk]`` (the CJK font of the figures, tests/plots/test_fonts.py). Without one, what needs it says which extra to install.
A missing module is simulated with ``sys.modules[name] = None``, which makes its import raise ImportError."""

from __future__ import annotations

import sys

import pytest

from attnsim.cli import main
from attnsim.errors import CorpusError, TrackingError
from attnsim.tracking.server import ServerError, check_backend
from attnsim.tracking.store import probe_database

TINY_TEXT = ["corpus=text", "corpus.seq_len=32", "corpus.limit=4", "tracking.figures=false", "trainer.progress_bar=false", "plots.examples=0"]


def hide(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_server_without_psycopg_names_the_server_extra(monkeypatch, capsys):
    hide(monkeypatch, "psycopg")
    with pytest.raises(ServerError, match=r"^The PostgreSQL backend needs psycopg, which is not installed \(.*\): pip install 'attnsim\[server\]'\.$"):
        check_backend("postgresql://bob:pw@127.0.0.1:1/x", timeout_s=2)
    monkeypatch.delenv("ATTNSIM_BACKEND_STORE_URI", raising=False)
    assert main(["server", "--backend-store-uri", "postgresql://bob:pw@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert "needs psycopg" in err and "pip install 'attnsim[server]'" in err and "Traceback" not in err and "pw@" not in err


def test_postgresql_tracking_store_without_psycopg_names_the_server_extra(monkeypatch):
    hide(monkeypatch, "psycopg")
    with pytest.raises(TrackingError) as caught:
        probe_database("postgresql://bob:pw@127.0.0.1:1/x", timeout_s=2)
    assert (
        str(caught.value)
        == "The PostgreSQL tracking store postgresql://bob:***@127.0.0.1:1/x needs psycopg, which is not installed: pip install 'attnsim[server]'."
    )
    # a URI naming another driver is not about psycopg: it goes on to the reachability probe
    with pytest.raises(TrackingError, match=r"cannot be reached at 127\.0\.0\.1:1"):
        probe_database("postgresql+psycopg2://bob:pw@127.0.0.1:1/x", timeout_s=2)


def test_run_on_a_postgresql_store_without_psycopg_stops_before_any_model(monkeypatch, capsys, tiny_bert, text_dir):
    hide(monkeypatch, "psycopg")
    assert main(["run", "csm", f"model.path={tiny_bert}", f"corpus.path={text_dir}", *TINY_TEXT, "--uri", "postgresql://bob@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert "needs psycopg" in err and "pip install 'attnsim[server]'" in err and "Traceback" not in err


def test_gguf_file_without_accelerate_names_the_gguf_extra(monkeypatch, tmp_path):
    from attnsim.capture.gguf import check_gguf
    from attnsim.errors import ModelError

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))  # the magic, then no header: the extras are checked before reading it
    hide(monkeypatch, "accelerate")
    with pytest.raises(ModelError) as caught:
        check_gguf(model)
    assert str(caught.value) == "Reading a .gguf file needs accelerate, not installed: pip install 'attnsim[gguf]'"
    hide(monkeypatch, "gguf")
    with pytest.raises(ModelError, match=r"^Reading a \.gguf file needs gguf and accelerate, not installed: pip install 'attnsim\[gguf\]'$"):
        check_gguf(model)


def test_default_images_without_scikit_image_name_the_vision_extra(monkeypatch):
    from attnsim.data.images import sample_images

    hide(monkeypatch, "skimage", "skimage.data")
    with pytest.raises(CorpusError) as caught:
        sample_images()
    assert str(caught.value) == (
        "The default images are scikit-image's sample photographs, and scikit-image is not installed: "
        "pip install 'attnsim[vision]' (or set corpus.path to your own images)."
    )


def test_vit_run_without_scikit_image_stops_before_any_run(monkeypatch, capsys, tmp_path):
    hide(monkeypatch, "skimage", "skimage.data")
    store = tmp_path / "mlflow.db"
    assert main(["run", "vit_csm", "corpus.limit=2", f"tracking.uri=sqlite:///{store}", "trainer.progress_bar=false"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'attnsim[vision]'" in err and "Traceback" not in err
    assert not store.exists()  # refused before the tracking store was opened
