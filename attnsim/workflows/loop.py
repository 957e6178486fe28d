"""The Lightning loop of a measurement run: the Trainer, this process's rank, the shards' check and predict.

:func:`make_trainer` builds the predict Trainer (no logger, no checkpoints, attnsim's progress bar);
:func:`global_rank` and :func:`check_shards` answer, before the model loads, which process this is and
whether every process of a distributed run gets a batch; :func:`predict_loop` runs the kind's predict.
Used by :mod:`attnsim.workflows.run`.
"""

from __future__ import annotations

from typing import List, Optional

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from attnsim.errors import ConfigError
from attnsim.workflows.common import run_lightning
from attnsim.workflows.kinds import MeasurementKind


def distributed() -> bool:
    """Whether this process is one rank of a torch.distributed process group (a DDP run)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def make_trainer(cfg: DictConfig, callbacks: List[pl.Callback], inference_mode: bool = True, description: Optional[str] = None) -> pl.Trainer:
    """A Lightning Trainer for predict: no logger, no checkpoints, progress bar as configured.

    The progress bar (``trainer.progress_bar``) is :class:`~attnsim.progress.AttnsimProgressBar`,
    named ``description`` (the run name), counting windows.

    ``inference_mode=False`` (gradient maps) runs predict under ``no_grad`` instead, so that
    ``predict_step`` can enable gradients.

    ``trainer.devices``, ``trainer.num_nodes`` and ``trainer.strategy`` pass to Lightning. The
    distributed sampler is off (``use_distributed_sampler=False``): the datamodules shard the windows
    themselves without repeating any (:class:`~attnsim.data.module.ShardSampler`).

    Raises:
        ConfigError: Lightning refused ``trainer.accelerator``, ``devices``, ``num_nodes``, ``strategy`` or
            ``precision`` (an unknown strategy or precision, a device count this machine lacks), with its reason.
    """
    from pytorch_lightning.utilities.exceptions import MisconfigurationException

    from attnsim.progress import AttnsimProgressBar

    t = cfg.trainer
    bar = [AttnsimProgressBar(description)] if t.progress_bar else []
    try:
        return pl.Trainer(
            accelerator=t.accelerator,
            devices=t.devices,
            num_nodes=t.num_nodes,
            strategy=t.strategy,
            use_distributed_sampler=False,
            precision=t.precision,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=t.progress_bar,
            enable_model_summary=False,
            callbacks=list(callbacks) + bar,
            inference_mode=inference_mode,
        )
    except (MisconfigurationException, ValueError) as exc:
        given = ", ".join(f"trainer.{key}={t[key]}" for key in ("accelerator", "devices", "num_nodes", "strategy", "precision"))
        reason = " ".join(str(exc).split())
        raise ConfigError(f"Lightning refused the trainer settings ({given}): {reason}") from None


def predict_loop(kind: MeasurementKind, trainer: pl.Trainer, module: pl.LightningModule, datamodule: pl.LightningDataModule) -> None:
    """Run the kind's predict over ``datamodule`` (:meth:`~attnsim.workflows.kinds.MeasurementKind.predict`),
    Ctrl-C and SIGTERM raised as :class:`~attnsim.workflows.common.Interrupted`."""
    # mean ablation predicts twice (its first pass sums each head's Z); every other run once
    kind.predict(lambda: run_lightning(lambda: trainer.predict(module, datamodule=datamodule, return_predictions=False), trainer, "predict"), module)


def name_progress_bar(trainer: pl.Trainer, name: str) -> None:
    """Name the Trainer's progress bar after the run (``name``), when it has one."""
    from attnsim.progress import AttnsimProgressBar

    for callback in trainer.callbacks:
        if isinstance(callback, AttnsimProgressBar):
            callback.description = name


def check_shards(trainer: pl.Trainer, windows: int, batch_size: int) -> None:
    """Refuse a distributed predict in which some process would get no batch (Lightning stops such a process).

    Args:
        trainer: from :func:`make_trainer`, after :func:`global_rank` (which sets its world size).
        windows: windows in the corpus.
        batch_size: ``trainer.batch_size``.

    Raises:
        ConfigError: fewer batches (``ceil(windows / batch_size)``) than processes (devices × nodes).
    """
    batches = -(-windows // batch_size)
    world = int(trainer.world_size)
    if world > batches:
        fix = (
            f"trainer.batch_size={windows // world} or smaller, or fewer devices"
            if windows >= world
            else f"at least {world} windows (corpus.limit) or at most {max(windows, 1)} processes"
        )
        raise ConfigError(
            f"The corpus has {windows} windows, {batches} batches of trainer.batch_size={batch_size}, but the run has {world} processes "
            f"(trainer.devices × trainer.num_nodes), and every process needs at least one batch. Use {fix}."
        )


def global_rank(trainer: pl.Trainer) -> int:
    """This process's global rank under ``trainer``'s strategy, known before predict launches anything.

    Lightning sets the ranks when predict starts; a distributed strategy's ranks come from its
    cluster environment (the launcher's ``NODE_RANK``/``LOCAL_RANK``, torchrun's ``RANK``, SLURM's
    ``SLURM_PROCID``), so they are set here the same way (and ``rank_zero_only.rank`` with them).
    A single-process strategy is rank 0.
    """
    strategy = trainer.strategy
    if getattr(strategy, "cluster_environment", None) is not None and hasattr(strategy, "set_world_ranks"):
        strategy.set_world_ranks()
    return int(strategy.global_rank)
