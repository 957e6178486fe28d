"""On a CUDA GPU: capture equals the CPU's, runs finish with the
CPU's statistics, and the benchmarks run with ``--device cuda``.

Every test here is marked ``cuda`` and skipped where torch sees no GPU (tests/conftest.py);
``benchmarks/gpu_check.sh`` runs them (``pytest -m cuda``) with the benchmarks on a GPU machine.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def bundled_batch(tmp_path_factory):
    """The bundled MiniLM's config and 4 BBC windows of 64 tokens, collated as attnsim's loader does."""
    from attnsim.config import load_config
    from attnsim.data.module import collate_windows
    from attnsim.workflows.run import prepare

    prepared = prepare(load_config("csm", ["corpus.limit=4", "corpus.seq_len=64", f"tracking.uri=sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"]))
    batch = collate_windows(list(enumerate(prepared.corpus.windows)))
    return prepared.info, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


@pytest.mark.parametrize("attention", [False, True], ids=["sdpa_z", "eager_z_and_probabilities"])
def test_capture_on_cuda_equals_capture_on_cpu(bundled_batch, attention):
    from attnsim.capture.hooks import forward_with_capture
    from attnsim.capture.load import load_model

    info, inputs = bundled_batch
    captured = {}
    for device in ("cpu", "cuda"):
        model, _ = load_model(info, attn_implementation="eager" if attention else "sdpa", needs_attention=attention)
        model = model.to(device).eval()
        with torch.inference_mode():
            _, capture = forward_with_capture(model, info.arch, info.n_heads, {k: v.to(device) for k, v in inputs.items()}, attention)
        captured[device] = capture
        assert capture.z.device.type == device and capture.z.shape == (info.n_layers, 4, info.n_heads, 64, info.d_head)
    cpu, gpu = captured["cpu"], captured["cuda"]
    # float32 on both; cuBLAS sums in another order (TF32 is off by default for matmul in torch >= 1.12)
    torch.testing.assert_close(gpu.z.cpu(), cpu.z, rtol=1e-4, atol=1e-4)
    if attention:
        torch.testing.assert_close(gpu.attention.cpu(), cpu.attention, rtol=1e-4, atol=1e-5)
        assert torch.allclose(gpu.attention.sum(-1).cpu(), torch.ones(()), atol=1e-4)  # rows of probabilities


def test_a_gpu_run_finishes_with_the_cpu_runs_statistics(tmp_path):
    from attnsim.workflows.run import run

    results = {}
    for accelerator in ("cpu", "gpu"):
        overrides = [
            "corpus.limit=8",
            "corpus.seq_len=64",
            "trainer.batch_size=4",
            f"trainer.accelerator={accelerator}",
            "trainer.progress_bar=false",
            "tracking.figures=false",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ]
        results[accelerator] = run("paper", overrides)
    cpu, gpu = results["cpu"], results["gpu"]
    assert gpu.status == "FINISHED" and gpu.windows == cpu.windows == 8
    assert gpu.metrics.keys() == cpu.metrics.keys()
    assert all(math.isfinite(v) for k, v in gpu.metrics.items() if math.isfinite(cpu.metrics[k]))  # defined where the CPU's are
    # plain means over every pair: equal to float32 rounding; shares of selected pairs may move with a near-tie
    for key in ("csm/mean", "separators/attention_entropy", "distance/mean_distance"):
        if key in cpu.metrics:
            assert gpu.metrics[key] == pytest.approx(cpu.metrics[key], rel=1e-4), key
    for key, value in cpu.metrics.items():
        if math.isfinite(value):
            assert gpu.metrics[key] == pytest.approx(value, rel=0.02, abs=0.02), key


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_memory_benchmark_on_cuda_reports_gpu_memory(tracking_uri):
    out = _script("memory.py", "--device", "cuda", "--experiment", "csm", "--small", "16", "--large", "64", "plots.examples=0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "peak GPU memory" in out.stdout and "target peak-memory ratio 64/16 windows <= 1.15:" in out.stdout
    assert "peak GPU memory ratio 64/16 windows:" in out.stdout


def test_throughput_benchmark_on_cuda_runs_both_sides_on_the_gpu(tracking_uri):
    out = _script("throughput.py", "--device", "cuda", "--windows", "64", "--rounds", "1", "--experiments", "csm", "--no-full-run")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("device cuda,") and "| all-MiniLM-L6-v2 | csm | 64 | sdpa |" in out.stdout
