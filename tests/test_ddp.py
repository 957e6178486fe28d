"""One MLflow run per experiment under Lightning DDP.

Shards without repeated windows, exact cross-rank sums of the accumulators, rank detection before
predict, refused configurations, and an end-to-end CPU/gloo run with two processes against one.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from attnsim.config import load_config
from attnsim.data.module import ShardSampler, WindowDataModule
from attnsim.errors import ConfigError
from attnsim.findings.base import Finding, reduce_findings
from attnsim.stats.base import Accumulator
from tests.helpers.paths import ROOT
from tests.helpers.runs import runs_of

# -- shards -------------------------------------------------------------------------


@pytest.mark.parametrize("length,world,batch", [(7, 2, 2), (7, 2, 1), (7, 3, 2), (10, 4, 3), (64, 3, 8), (5, 2, 8), (3, 2, 1)])
def test_shards_cover_every_window_once_in_single_process_batches(length, world, batch):
    shards = [list(ShardSampler(length, rank, world, batch)) for rank in range(world)]
    assert sum(shards, []) == list(range(length))  # no window twice, none left out, corpus order
    assert shards[0][:1] == [0]  # rank 0 reads the first window (the examples in figures)
    for shard in shards:
        if shard:
            assert shard[0] % batch == 0  # every shard starts on a batch boundary: the same batches as one process
    sizes = [len(s) for s in shards]
    assert [len(ShardSampler(length, r, world, batch)) for r in range(world)] == sizes


def test_shards_of_seven_windows_on_two_ranks():
    assert list(ShardSampler(7, 0, 2, 2)) == [0, 1, 2, 3]
    assert list(ShardSampler(7, 1, 2, 2)) == [4, 5, 6]
    assert list(ShardSampler(7, 0, 1, 2)) == list(range(7))
    with pytest.raises(ValueError, match="rank 2 is not in 0..1"):
        ShardSampler(7, 2, 2)


def test_datamodule_serves_its_rank_shard_only():
    module = WindowDataModule([object()] * 7, batch_size=2)
    assert list(module.predict_dataloader().sampler) == list(range(7))  # no trainer: the whole corpus
    module.trainer = SimpleNamespace(global_rank=1, world_size=2)
    assert list(module.predict_dataloader().sampler) == [4, 5, 6]
    module.trainer = SimpleNamespace(global_rank=0, world_size=2)
    assert list(module.predict_dataloader().sampler) == [0, 1, 2, 3]


# -- trainer, ranks and refused configurations ------------------------------------------------


@pytest.fixture
def restore_rank():
    from lightning_fabric.utilities.rank_zero import rank_zero_only as fabric_rank
    from pytorch_lightning.utilities.rank_zero import rank_zero_only as pl_rank

    saved = (fabric_rank.rank, pl_rank.rank)
    yield
    fabric_rank.rank, pl_rank.rank = saved


def _ddp_trainer(overrides=()):
    from attnsim.workflows.loop import make_trainer

    cfg = load_config("csm", ["trainer.devices=2", "trainer.strategy=ddp", "trainer.progress_bar=false", *overrides])
    return make_trainer(cfg, [])


def test_make_trainer_passes_strategy_and_keeps_attnsim_sampler(monkeypatch, restore_rank):
    from pytorch_lightning.strategies import DDPStrategy

    from attnsim.workflows.loop import global_rank

    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    trainer = _ddp_trainer()
    assert isinstance(trainer.strategy, DDPStrategy)
    assert trainer._accelerator_connector.use_distributed_sampler is False  # Lightning would pad with repeated windows
    assert global_rank(trainer) == 0 and trainer.world_size == 2
    monkeypatch.setenv("LOCAL_RANK", "1")  # what Lightning's subprocess launcher gives the re-run command
    monkeypatch.setenv("NODE_RANK", "0")
    assert global_rank(_ddp_trainer()) == 1


def test_global_rank_under_torchrun(monkeypatch, restore_rank):
    from attnsim.workflows.loop import global_rank

    monkeypatch.delenv("NODE_RANK", raising=False)
    for key, value in {
        "RANK": "3",
        "GROUP_RANK": "1",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29555",
    }.items():
        monkeypatch.setenv(key, value)
    trainer = _ddp_trainer(["trainer.num_nodes=2"])
    assert global_rank(trainer) == 3 and trainer.world_size == 4


@pytest.mark.parametrize(
    "override,message",
    [
        ("trainer.strategy=ddp_spawn", "trainer.strategy=ddp"),
        ("trainer.strategy=ddp_fork", "spawned or forked"),
        ("trainer.num_nodes=0", "trainer.num_nodes"),
    ],
)
def test_config_refuses_spawn_strategies_and_no_nodes(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("csm", [override])


@pytest.mark.parametrize(
    "override, reason",
    [
        ("trainer.strategy=bogus", r"trainer.strategy=bogus, trainer.precision=32-true\): You selected an invalid strategy name"),
        ("trainer.precision=bogus", r"trainer.strategy=auto, trainer.precision=bogus\): Precision 'bogus' is invalid. Allowed precision values"),
    ],
)
def test_settings_lightning_refuses_are_one_config_error(override, reason):
    """What only Lightning can judge (a strategy or precision name) comes back as one
    ConfigError naming the trainer keys and Lightning's reason, not Lightning's traceback; the CLI prints it before any
    run exists."""
    from attnsim.workflows.loop import make_trainer

    with pytest.raises(
        ConfigError, match=rf"Lightning refused the trainer settings \(trainer.accelerator=cpu, trainer.devices=1, trainer.num_nodes=1, {reason}"
    ):
        make_trainer(load_config("csm", [override]), [])


def test_fewer_batches_than_processes_is_refused(monkeypatch, restore_rank):
    from attnsim.workflows.loop import check_shards, global_rank

    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    trainer = _ddp_trainer()
    global_rank(trainer)
    check_shards(trainer, 3, 2)  # two batches, two processes
    with pytest.raises(ConfigError, match=r"1 windows, 1 batches .* 2 processes"):
        check_shards(trainer, 1, 2)
    with pytest.raises(ConfigError, match="trainer.batch_size=2 or smaller"):
        check_shards(trainer, 4, 4)


# -- exact reduction across ranks (two gloo processes) ----------------------------------------


class _Sums(Accumulator):
    def __init__(self):
        super().__init__()
        self.add_sum("total", 2, 3)
        self.add_sum("count", 3, dtype=torch.int64)

    def update(self, values: torch.Tensor) -> None:  # type: ignore[override]
        self.fold({"total": values.sum(0), "count": torch.ones(3, dtype=torch.int64) * values.shape[0]})

    def compute(self):
        return {"mean": self.total / self.count}


class _Max(Accumulator):
    def __init__(self):
        super().__init__()
        self.add_state("peak", default=torch.zeros(2), dist_reduce_fx="max")

    def update(self, values):  # type: ignore[override]
        pass

    def compute(self):
        return {}


class _SumsFinding(Finding):
    name = "sums"

    def build(self):
        return {"sums": _Sums()}


def _values(rank: int) -> torch.Tensor:
    return torch.arange(rank * 12, rank * 12 + 4 * 6 * (rank + 1), dtype=torch.float64).reshape(-1, 2, 3) / 7


def _reduce_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    finding = _SumsFinding(1, 1, 4, None)
    values = _values(rank)
    finding.accumulators["sums"].update(values)
    finding.windows = values.shape[0]
    local = finding.accumulators["sums"].compute()["mean"].clone()  # compute() never communicates
    reduce_findings([finding])
    error = ""
    try:
        _Max().reduce_across_ranks()
    except ValueError as exc:
        error = str(exc)
    acc = finding.accumulators["sums"]
    torch.save(
        {"local": local, "total": acc.total, "count": acc.count, "mean": acc.compute()["mean"], "windows": finding.windows, "error": error},
        os.path.join(out_dir, f"{rank}.pt"),
    )
    dist.destroy_process_group()


def test_reduce_findings_sums_states_and_windows_exactly(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_reduce_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    everything = torch.cat([_values(0), _values(1)])  # 4 + 8 windows
    for rank in (0, 1):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert torch.equal(got["local"], _values(rank).mean(0))
        assert torch.allclose(got["total"], everything.sum(0), rtol=1e-15, atol=0)
        assert got["count"].tolist() == [12, 12, 12]
        assert torch.allclose(got["mean"], everything.mean(0), rtol=1e-15, atol=0)
        assert got["windows"] == 12
        assert "'peak' is not a sum" in got["error"]


def test_reduce_without_process_group_changes_nothing():
    finding = _SumsFinding(1, 1, 4, None)
    finding.accumulators["sums"].update(_values(0))
    finding.windows = 4
    reduce_findings([finding])
    assert finding.windows == 4 and finding.accumulators["sums"].count.tolist() == [4, 4, 4]


# -- end to end: one run, equal to a single process -----------------------------------------------


def _metrics_equal(a: dict, b: dict) -> list:
    bad = []
    for key in sorted(set(a) | set(b)):
        if "/time_" in key:
            continue
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            bad.append((key, x, y))
        elif not ((math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-6 * max(abs(x), abs(y))):
            bad.append((key, x, y))
    return bad


def _artifacts(client, run_id: str, path=None) -> list:
    out = []
    for item in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return out


@pytest.mark.e2e
def test_ddp_run_is_one_run_equal_to_a_single_process(tmp_path):
    import pandas as pd

    import attnsim

    # one torch thread in every process, the single one too: the model's float32 forward may round differently
    # with another thread count (oneDNN on an AVX-512 CPU: 1 and 2 threads moved a mean of cancelling CSM values
    # by 1.6e-6 relative), and this test is about the ranks' shards and merge, not the BLAS
    common = [
        "corpus.limit=7",
        "corpus.seq_len=32",
        "trainer.batch_size=2",
        "trainer.progress_bar=false",
        "tracking.figures=false",
        "trainer.accelerator=cpu",
        "trainer.threads=1",
    ]
    ddp_uri = f"sqlite:///{tmp_path / 'ddp' / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)
    # the CLI, as a user runs it: Lightning's launcher re-runs this same command for rank 1
    done = subprocess.run(
        [sys.executable, "-m", "attnsim.cli", "run", "paper", *common, "trainer.devices=2", "trainer.strategy=ddp", f"tracking.uri={ddp_uri}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run id:") == 1  # rank 1 prints nothing
    threads = torch.get_num_threads()
    try:
        single = attnsim.run("paper", [*common, f"tracking.uri=sqlite:///{tmp_path / 'one' / 'mlflow.db'}"])
    finally:
        torch.set_num_threads(threads)  # trainer.threads=1 set it for this test process

    client, runs = runs_of(ddp_uri)
    assert len(runs) == 1  # rank 1 created none
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.metrics["zz_run/windows"] == 7
    assert run.data.tags["attnsim.windows"] == "7"
    one = client.__class__(single.tracking_uri).get_run(single.run_id)
    assert one.data.metrics["zz_run/windows"] == 7
    assert _metrics_equal(run.data.metrics, one.data.metrics) == []
    # the tables (every head of every statistic, profiles, anchors' top tokens, high-pair counts) match too
    paths = _artifacts(client, run.info.run_id)
    one_client = client.__class__(single.tracking_uri)
    assert paths == _artifacts(one_client, single.run_id)
    tables = [p for p in paths if p.endswith(".csv")]
    assert len(tables) > 8
    for path in tables:
        ddp_table = pd.read_csv(client.download_artifacts(run.info.run_id, path, str(tmp_path / "a")))
        one_table = pd.read_csv(one_client.download_artifacts(single.run_id, path, str(tmp_path / "b")))
        pd.testing.assert_frame_equal(ddp_table, one_table, rtol=1e-6, atol=1e-12, obj=path)
