"""The dense capture's memory estimate (:func:`attnsim.capture.load.dense_memory`) against measured peaks, and the
batch it counts (:func:`attnsim.capture.load.check_dense_fits`: the smaller of ``trainer.batch_size`` and the windows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnsim.capture import load
from attnsim.capture.load import check_dense_fits, dense_memory, inspect_model
from attnsim.errors import ConfigError
from tests.helpers.paths import ROOT

LENGTHS = (512, 1024, 2048)

# Run in a fresh process: a warm-up run (every lazy import made, numba's kernels compiled), then one dense run per length.
# Each run's baseline is the resident memory just after its model loaded, when the peak (VmHWM) is reset to it (writing
# 5 to /proc/self/clear_refs); its peak above the baseline is VmHWM - baseline when the run has finished.
MEASURE = r"""
import gc, json, sys

def status(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

import attnsim.capture.load as load
import attnsim.workflows.run as runner

model, tracking, lengths = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
original, base = load.load_model, {}

def loaded(*args, **kwargs):
    result = original(*args, **kwargs)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # VmHWM := VmRSS
    base["rss"] = status("VmRSS")
    return result

load.load_model = loaded
peaks = {}
for length in [64, *lengths]:
    runner.run("paper", [f"model.path={model}", f"tracking.uri={tracking}", "capture.path=dense", f"corpus.seq_len={length}",
                         "corpus.source=repeated_tokens", "corpus.repeat_length=20", "corpus.repeats=2", "corpus.limit=1",
                         "trainer.batch_size=1", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false"])
    peaks[length] = status("VmHWM") - base["rss"]
print(json.dumps(peaks))
"""


@pytest.fixture(scope="module")
def wide_models(tmp_path_factory):
    """A BERT and a Llama of 2 layers, 8 heads and d_model 64 (attention maps dominate), random weights, saved with a
    tokenizer (``model.path=build`` has none for text): the MiniLM tokenizer for BERT, one trained here for Llama."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from tests.helpers.models import BUNDLED
    from tests.helpers.tiny_models import save_tiny

    root = tmp_path_factory.mktemp("wide")
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    torch.manual_seed(0)
    bert = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=8, intermediate_size=128)
    bert.max_position_embeddings = max(LENGTHS)
    BertModel(bert).save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    save_tiny(root / "llama", "llama", layers=2, heads=8, hidden=64, positions=max(LENGTHS))
    return {"bert": root / "bert", "llama": root / "llama"}


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures resident memory through Linux's /proc")
def test_the_estimate_is_at_most_30_percent_above_the_measured_peak_and_never_below(wide_models, tmp_path):
    """Dense ``paper`` runs (CSM and attention findings) of one window at 512, 1,024 and 2,048 tokens on a BERT and a
    Llama: the peak resident memory above the loaded model is between 70 % and 100 % of :func:`dense_memory`.

    How the peak is measured: each model's runs are one subprocess (the two run side by side), so that nothing of the
    test's own process counts. Resident memory is what the estimate is compared with (the machine's available
    memory); on CPU torch's tensors are plain allocations, so the kernel's high-water mark VmHWM counts every one of
    them. It is reset to the current resident memory just after the model loads (``5`` written to
    ``/proc/self/clear_refs``) and read when the run ends. ``MALLOC_MMAP_THRESHOLD_=131072`` makes glibc map every
    allocation of 128 KiB or more (every T x T or pair-space tensor) on its own and unmap it when freed, so that memory
    freed by a run is given back rather than kept in the heap and reused, which would hide part of a later peak. A
    warm-up run at 64 tokens comes first: lazy imports and numba's compilation would otherwise count, about 180 MB.
    ``resource.getrusage``'s ``ru_maxrss`` cannot be reset (the warm-up's peak would hide the runs'), and torch's
    profiler (``profile_memory``) counts torch's own allocations only, not the NumPy arrays of the compiled walk, and
    slows the run several times.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MALLOC_MMAP_THRESHOLD_": "131072"}
    lengths = ",".join(map(str, LENGTHS))
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", MEASURE, str(path), f"sqlite:///{tmp_path / name}.db", lengths],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, path in wide_models.items()
    }
    rows = []
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        peaks = json.loads(out.strip().splitlines()[-1])
        for length in LENGTHS:
            estimate = dense_memory(inspect_model(str(wide_models[name]), length), length, 1)
            rows.append((name, length, peaks[str(length)], estimate))
    ratios = {(name, length): round(peak / estimate, 3) for name, length, peak, estimate in rows}
    assert all(0.7 <= ratio <= 1.0 for ratio in ratios.values()), ratios


def test_the_estimate_counts_the_batch_actually_run(tiny_bert, monkeypatch):
    """A corpus of one window with trainer.batch_size=32 runs batches of one: it is estimated, and refused, at batch 1."""
    info = inspect_model(str(tiny_bert), 128)
    one, full = dense_memory(info, 128, 1), dense_memory(info, 128, 32)
    assert (round(one / 2**20), round(full / 2**20)) == (2, 42)  # MiB: the maps and tables of 1 and of 32 windows
    monkeypatch.setattr(load, "available_memory", lambda: 2 * one)
    check_dense_fits(info, 128, 32, "dense", True, windows=1)  # batch 1: fits
    with pytest.raises(ConfigError) as refused:
        check_dense_fits(info, 128, 32, "dense", True)  # windows not known: the batch size is run
    assert f"about {full / 2**20:.0f} MiB" in str(refused.value) and "32 windows" in str(refused.value)
    monkeypatch.setattr(load, "available_memory", lambda: one // 2)
    with pytest.raises(ConfigError) as refused:
        check_dense_fits(info, 128, 32, "dense", True, windows=1)
    message = str(refused.value)
    assert f"about {one / 2**20:.0f} MiB" in message and f"{one // 2 / 2**20:.0f} MiB available" in message
    assert "2 layers x 4 heads x 1 windows x 128² tokens" in message and "a batch of 1: the corpus has 1 window" in message
    assert "shorten corpus.seq_len" in message  # no batch size fits


def test_the_walk_chunk_of_the_estimate_is_the_views():
    from attnsim.stats.pairs.view import CHUNK_ELEMENTS_CPU

    assert load.WALK_CHUNK_ELEMENTS == CHUNK_ELEMENTS_CPU


def test_a_run_of_one_window_is_checked_at_batch_1_once_its_windows_are_counted(tiny_bert, tracking_uri, monkeypatch):
    """``attnsim run`` with corpus.limit=1 and trainer.batch_size=32: :func:`~attnsim.workflows.run.prepare` checks the
    batch of one it will run, not 32, before any model loads or run exists."""
    import attnsim.workflows.run as runner
    from attnsim.config import load_config
    from tests.helpers.runs import runs_of

    cfg = load_config("paper", [f"model.path={tiny_bert}", "corpus.limit=1", "corpus.seq_len=128", "trainer.batch_size=32", "capture.path=dense"])
    info = inspect_model(str(tiny_bert), 128)
    one, full = dense_memory(info, 128, 1), dense_memory(info, 128, 32)
    monkeypatch.setattr(load, "available_memory", lambda: 2 * one)  # room for one window, far from 32
    assert len(runner.prepare(cfg).corpus) == 1  # accepted: the batch run is one window
    monkeypatch.setattr(load, "available_memory", lambda: one - 1)
    with pytest.raises(ConfigError) as refused:
        runner.prepare(cfg)
    message = str(refused.value)
    assert f"about {one / 2**20:.0f} MiB" in message and f"{full / 2**20:.0f} MiB" not in message
    assert "x 1 windows x 128² tokens" in message and "the corpus has 1 window, fewer than trainer.batch_size=32" in message
    assert runs_of(tracking_uri)[1] == []
