"""The benchmark scripts run end to end on a few windows and refuse bad options up front.

Their figures are not checked here (no timed unit tests); only that they run, print the
lines a reader looks for, and exit as documented in the README ("Performance").
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT


def script(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_memory_benchmark_runs_and_prints_its_target(tracking_uri):
    out = script("memory.py", "--experiment", "csm", "--small", "4", "--large", "8", "plots.examples=0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| csm | 4 |" in out.stdout and "| csm | 8 |" in out.stdout
    assert "target peak-memory ratio 8/4 windows <= 1.15:" in out.stdout


def test_throughput_benchmark_runs_and_prints_its_table(tracking_uri):
    out = script("throughput.py", "--windows", "8", "--batch-size", "4", "--rounds", "1", "--experiments", "csm", "--no-full-run")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| all-MiniLM-L6-v2 | csm | 8 | sdpa |" in out.stdout
    assert "csm: one forward pass per batch: 2 calls for 2 batches" in out.stdout


def test_end_to_end_benchmark_times_attnsim_and_the_plain_script_per_stage():
    out = script("end_to_end.py", "--pairs", "1", "--windows", "4", "--batch-size", "2", "--experiments", "csm", "--floor")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| command | wall | plain script | ratio | CPU s (user+sys) vs plain | peak RSS vs plain |" in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("| `attnsim run csm corpus.limit=4` |"))
    wall, plain, ratio = (float(cell.strip().rstrip(" s×")) for cell in row.split("|")[2:5])
    # the plain script's wall over attnsim's: the wall cells are rounded to 0.1 s and the ratio to 0.01, so it lies
    # between the ratios of the cells' rounding bounds (a fixed tolerance failed for runs of a few seconds)
    assert (plain - 0.05) / (wall + 0.05) - 0.005 <= ratio <= (plain + 0.05) / (wall - 0.05) + 0.005
    rows = [line.split("|")[1:3] for line in out.stdout.splitlines() if line.count("|") == 3]
    stages = {name.strip(): float(value) for name, value in rows if value.strip().replace(".", "", 1).isdigit()}
    assert {"imports", "windows", "tracker", "setup", "load_model", "open_run", "predict", "figures", "unattributed"} <= set(stages)
    assert stages["imports"] > 0 and stages["predict"] > 0 and stages["unattributed"] < stages["total (command start to the timings logged)"]
    assert "target csm whole-process ratio >= 0.8:" in out.stdout and "target csm peak RSS <= 1.5x the plain script's:" in out.stdout
    # the floor: the plain script with Lightning, MLflow's SQL store and the compiled kernels resident (hundreds of MiB more)
    floor = next(line for line in out.stdout.splitlines() if "(--floor) peaks at" in line)
    assert float(floor.split("MiB, ")[1].split("x")[0]) > 1.2, floor


def test_rss_timeline_tags_each_sample_with_its_stage_and_splits_anonymous_from_file_backed(tracking_uri, tmp_path):
    samples = tmp_path / "rss.csv"
    out = script(
        "rss_timeline.py", "csm", "corpus.limit=4", "corpus.seq_len=32", "trainer.batch_size=2", "plots.examples=0", "--every", "2", "--csv", str(samples)
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| stage | peak own RSS MiB | anonymous | file-backed | at s | where | children MiB then |" in out.stdout
    stages = {line.split("|")[1].strip() for line in out.stdout.splitlines() if line.startswith("| ")}
    assert {"imports", "load_model", "update:csm", "summarise"} <= stages  # a forward pass of 2 short windows may fall between samples
    assert "own VmHWM" in out.stdout and "what wait4 hands the parent:" in out.stdout
    rows = samples.read_text().splitlines()
    assert rows[0] == "seconds,stage,own_mib,children_mib,anon_mib,file_mib"
    for row in rows[1:]:
        _, _, own, _, anon, file = row.split(",")
        assert abs(float(own) - float(anon) - float(file)) <= 0.2  # each rounded to 0.1 MiB
    assert {row.split(",")[1].split(":")[0] for row in rows[1:]} >= {"b0", "b1"}  # two batches of two windows


def test_statistics_cpu_benchmark_prints_each_stage():
    out = script("statistics_cpu.py", "--windows", "4", "--batch-size", "2", "--repeats", "1")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "all-MiniLM-L6-v2, paper: 4 windows, batch 2, 1 pass, 1 thread" in out.stdout
    rows = {
        line.split("|")[1].strip(): float(line.split("|")[2])
        for line in out.stdout.splitlines()
        if line.startswith("| ") and "---" not in line and "stage" not in line
    }
    assert "capture path streamed" in out.stdout  # the run's own path: paper's attention walk runs inside the forward pass
    assert {"forward and capture", "csm walk", "SeparatorsFinding", "statistics, in all", "forward and statistics"} <= set(rows)
    assert "attention walk" not in rows
    assert rows["statistics, in all"] >= rows["csm walk"] > 0
    assert rows["forward and statistics"] >= max(rows["forward and capture"], rows["statistics, in all"])


def test_operations_benchmark_prints_each_operation_and_the_ceilings():
    out = script("operations.py", "--windows", "2", "--repeats", "1")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "statistics path compiled" in out.stdout or "statistics path fallback" in out.stdout
    assert "| CSM product, float32 |" in out.stdout and "| attention entropy: p log p, window by window |" in out.stdout
    ceilings = {line.split("|")[1].strip(): line.split("|")[4].strip() for line in out.stdout.splitlines() if line.startswith(("| csm |", "| paper |"))}
    assert set(ceilings) == {"csm", "paper"}
    for value in ceilings.values():
        assert value == "" or 0 < float(value) <= 1


def test_imports_benchmark_adds_up_each_library_and_judges_both_targets():
    out = script("imports.py", "--repeats", "1", "--windows", "2", "--no-cli")  # the reading commands need two runs: run by hand
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [
        line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| ") and not line.startswith("| step") and not line.startswith("| ---")
    ]
    assert [r[0].strip() for r in rows][:3] == ["interpreter", "torch", "transformers"] and len(rows) == 9
    added_s, cumulative_s, added_mib, cumulative_mib = ([float(r[i]) for r in rows] for i in (1, 2, 3, 4))
    assert abs(sum(added_s) - cumulative_s[-1]) <= 0.005 * len(rows) and abs(sum(added_mib) - cumulative_mib[-1]) <= 0.5 * len(rows)
    assert added_mib[1] > 50 and cumulative_s[1] > 0.1  # importing torch costs memory and time
    assert "imports before the model loads (steps 1-8): " in out.stdout and "target < 3 s -> " in out.stdout
    assert "plain script (2 windows): peak RSS " in out.stdout and "add " in out.stdout


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("throughput.py", ["--rounds", "0"], "0 is not a positive number"),
        ("throughput.py", ["--device", "gpu"], "'gpu' is not a device; use cpu or cuda"),
        ("throughput.py", ["--experiments", "csm", "nosuch"], "Unknown experiment 'nosuch'"),
        ("memory.py", ["--small", "64", "--large", "32"], "--small 64 must be fewer windows than --large 32"),
        ("operations.py", ["--repeats", "0"], "0 is not a positive number"),
        ("imports.py", ["--repeats", "0"], "0 is not a positive number"),
        ("figures.py", ["--rounds", "0"], "0 is not a positive number"),
        ("memory.py", ["corpus.nosuch=1"], "Unknown config key 'corpus.nosuch'"),
        ("scaling.py", ["--windows", "0"], "0 is not a positive number"),
        ("scaling.py", ["--server-uri", "127.0.0.1:5000"], "'127.0.0.1:5000' is not a tracking server URI; give http://host:port"),
        ("scaling.py", ["--experiment", "nosuch"], "Unknown experiment 'nosuch'"),
        ("scaling.py", ["--device", "gpu"], "'gpu' is not a device; use cpu or cuda"),
        ("end_to_end.py", ["--pairs", "0"], "0 is not a positive number"),
        ("end_to_end.py", ["--experiments", "nosuch"], "Unknown experiment 'nosuch'"),
        ("end_to_end.py", ["--device", "cuda:x"], "'cuda:x' is not a device; use cpu or cuda"),
        ("bert_base_scale.py", ["--seq-len", "1024"], "--seq-len 1024 is longer than BERT-base's 512 positions"),
        ("bert_base_scale.py", ["--experiments", "nosuch"], "Unknown experiment 'nosuch'"),
        ("end_to_end.py", ["--seq-len", "0"], "0 is not a positive number"),
        ("memory.py", ["--model", "no/such/folder"], "'no/such/folder' is neither bundled, smollm2 nor an existing model folder"),
        ("long_context.py", ["--model", "no/such/folder"], "'no/such/folder' is neither bundled, smollm2 nor an existing model folder"),
        ("throughput.py", ["--experiments", "finetune_bbc"], "--experiments finetune_bbc: a fine-tuning experiment (task: finetune)"),
        ("throughput.py", ["--model", "benchmarks"], "'benchmarks' is a folder without config.json, not a model folder"),
        ("operations.py", ["--model", "README.md"], "'README.md' is a file but not a .gguf model"),
        # found once the model's config is read (after torch loads); the message names the option that set the key
        ("throughput.py", ["--seq-len", "9000", "--no-full-run"], "Set corpus.seq_len to at most 512. In this benchmark, --seq-len sets corpus.seq_len."),
    ],
)
def test_bad_options_stop_before_anything_is_measured(name, args, message):
    out = script(name, *args, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "RESULT" not in out.stdout


GPU_CHECK = ROOT / "benchmarks" / "gpu_check.sh"


def gpu_check(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(GPU_CHECK), *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ, PYTHON=python))


def test_gpu_check_is_valid_bash_and_refuses_bad_options():
    assert subprocess.run(["bash", "-n", str(GPU_CHECK)], capture_output=True).returncode == 0
    for args, message in [
        (["--bogus"], "error: unknown option '--bogus'"),
        (["--gpu", "x"], "error: --gpu takes a GPU index"),
        (["--logs"], "error: --logs takes a folder"),
    ]:
        out = gpu_check(*args)
        assert out.returncode == 2 and message in out.stderr and "==" not in out.stdout, out.stderr
    helped = gpu_check("--help")
    assert helped.returncode == 0 and "--device cuda" in helped.stdout


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA GPU")
def test_gpu_check_stops_before_any_step_without_a_cuda_gpu():
    out = gpu_check()
    assert out.returncode == 2 and "error: no CUDA GPU for this check: torch " in out.stderr and "sees no CUDA GPU" in out.stderr
    assert "== tests" not in out.stdout


def test_gpu_check_runs_its_steps_and_prints_one_table(tmp_path):
    # a stand-in interpreter that "sees" a GPU and prints what the tests and benchmarks print
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in\n'
        '  -c*) echo "Fake GPU, torch 9.9, CUDA 12.4" ;;\n'
        '  *pytest*) echo "...."; echo "===== 5 passed in 3.21s =====" ;;\n'
        '  *throughput.py*--model\\ smollm2*) echo "| SmolLM2-135M-Instruct | paper | 512 | eager | 300.0 | 270.0 | 0.90 | 0.1 | 0.2 | 0.3 |"; echo "| SmolLM2-135M-Instruct | csm | 512 | sdpa | 310.0 | 300.0 | 0.97 | 0.1 | 0.2 | 0.3 |" ;;\n'
        '  *throughput.py*) echo "| all-MiniLM-L6-v2 | paper | 2048 | eager | 900.0 | 700.0 | 0.78 | 0.1 | 0.2 | 0.3 |"; echo "| all-MiniLM-L6-v2 | csm | 2048 | sdpa | 950.0 | 900.0 | 0.95 | 0.1 | 0.2 | 0.3 |" ;;\n'
        '  *memory.py*) echo "target peak-memory ratio 2048/256 windows <= 1.15: 1.010 -> PASS"; echo "peak GPU memory ratio 2048/256 windows: 1.000 (no target)" ;;\n'
        '  *bert_base_scale.py*) echo "| csm | cuda | 20,000 | 41.0 | 52.5 | 488 | 3100 | 9000 | PASS (< 60 s on one H200) |" ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    out = gpu_check("--logs", str(tmp_path / "logs"), python=str(fake))
    assert out.returncode == 0, out.stderr
    table = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    assert table[0] == "| step | result | time | figures |" and [row.split(" | ")[0] for row in table[2:]] == [
        "| tests",
        "| throughput",
        "| smollm2",
        "| memory",
        "| bert_base",
    ]
    assert "| ok |" in table[2] and "5 passed in 3.21s" in table[2]
    assert "paper 900.0 -> 700.0 samples/s, ratio 0.78" in table[3] and "csm 950.0 -> 900.0 samples/s, ratio 0.95" in table[3]
    assert "target peak-memory ratio 2048/256 windows <= 1.15: 1.010 -> PASS; peak GPU memory ratio 2048/256 windows: 1.000" in table[5]
    assert "csm over 20,000 windows: predict 41.0 s, run 52.5 s, peak GPU 9000 MiB, PASS (< 60 s on one H200)" in table[6]
    assert "paper 300.0 -> 270.0 samples/s, ratio 0.90; csm 310.0 -> 300.0 samples/s, ratio 0.97" in table[4]
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["bert_base.log", "memory.log", "smollm2.log", "tests.log", "throughput.log"]
