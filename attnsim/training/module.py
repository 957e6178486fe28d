"""Lightning pieces of fine-tuning: the classifier module, a logger that writes through
:class:`~attnsim.tracking.sink.RunSink`, and a callback that saves ``save_pretrained`` checkpoints.

Metric names (MLflow keys): ``train/loss``, ``train/accuracy`` and
``train/lr`` every optimizer step; ``val/loss`` and ``val/accuracy`` (means
over the validation windows) at every validation; ``checkpoint/step`` when a
checkpoint is written. The MLflow ``step`` of each value is the number of
optimizer steps done (Lightning's ``global_step``), so ``val/accuracy`` at
step 50 belongs to the checkpoint ``step-000050``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers.logger import Logger
from pytorch_lightning.utilities import rank_zero_only

from attnsim.training.checkpoints import CHECKPOINT_META, checkpoint_name

log = logging.getLogger(__name__)


def warmup_linear(warmup_steps: int, max_steps: int) -> Callable[[int], float]:
    """Learning-rate factor per optimizer step: linear warm-up to 1, then linear decay to 0 at ``max_steps``.

    Step ``s`` (0-indexed) gets ``(s + 1) / warmup_steps`` while ``s < warmup_steps``,
    then ``(max_steps - s) / (max_steps - warmup_steps)`` (the schedule of Devlin et al. 2019, BERT).
    """

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (max_steps - step) / max(1, max_steps - warmup_steps))

    return factor


class ClassifierModule(pl.LightningModule):
    """Fine-tunes a Hugging Face ``...ForSequenceClassification`` model with cross-entropy.

    Batches: ``input_ids``/``attention_mask`` (B, T) int64, ``labels`` (B,) int64.
    Optimizer: AdamW (no weight decay on biases and LayerNorm weights) with
    :func:`warmup_linear`, stepped every optimizer step.
    """

    def __init__(self, model: torch.nn.Module, learning_rate: float, weight_decay: float, warmup_steps: int, max_steps: int):
        super().__init__()
        self.model = model
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps

    def _forward(self, batch: Mapping[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        correct = (out.logits.argmax(dim=-1) == batch["labels"]).float()  # (B,)
        return out.loss, correct.mean()

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, accuracy = self._forward(batch)
        size = batch["labels"].shape[0]
        # the learning rate this step's update uses (the scheduler steps after it)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log_dict({"train/loss": loss, "train/accuracy": accuracy}, on_step=True, on_epoch=False, batch_size=size)
        self.log("train/lr", lr, on_step=True, on_epoch=False, batch_size=size)
        return loss

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        loss, accuracy = self._forward(batch)
        # Lightning averages over batches weighted by batch_size: a mean over windows
        self.log_dict({"val/loss": loss, "val/accuracy": accuracy}, on_step=False, on_epoch=True, batch_size=batch["labels"].shape[0])

    def configure_optimizers(self) -> Dict[str, Any]:
        decay, no_decay = [], []
        for name, param in self.model.named_parameters():
            if not param.requires_grad:
                continue
            (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name else decay).append(param)
        groups = [{"params": decay, "weight_decay": self.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=self.learning_rate)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_linear(self.warmup_steps, self.max_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}


class SinkLogger(Logger):
    """A Lightning logger that writes metrics through one run's sink (rank zero only): any object with
    ``run_id``, ``log_metrics(values, step)`` and ``flush()``, e.g. :class:`attnsim.tracking.sink.RunSink`
    (not imported: training sits below tracking in the import graph).

    It neither creates nor ends the run (the :class:`~attnsim.tracking.store.Tracker`
    does), logs no hyperparameters (the caller logs the flattened config), and
    renames Lightning's ``epoch`` value ``train/epoch``. Non-finite values are
    skipped by the sink's guard.

    Steps: Lightning's own logging step lags by one during fit (the count of
    batches stepped *before* the current one). When ``step_source`` is set
    (e.g. ``lambda: trainer.global_step``) every value is logged at the number
    of optimizer steps done when it is logged instead: a training loss at step
    ``s`` is the loss of the batch of update ``s`` (1-indexed), a validation
    value at step ``s`` was measured on the weights after ``s`` updates, the
    weights of checkpoint ``step-00000s``.
    """

    def __init__(self, sink: Any, step_source: Optional[Callable[[], int]] = None):
        super().__init__()
        self.sink = sink
        self.step_source = step_source

    @property
    def name(self) -> str:
        return "attnsim"

    @property
    def version(self) -> str:
        return self.sink.run_id

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        return None

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        values = {("train/epoch" if k == "epoch" else k): float(v) for k, v in metrics.items()}
        at = self.step_source() if self.step_source is not None else step
        self.sink.log_metrics(values, step=int(at or 0))

    @rank_zero_only
    def save(self) -> None:
        self.sink.flush()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.sink.flush()


class PretrainedCheckpoint(pl.Callback):
    """Saves ``directory/step-NNNNNN`` every ``every_n_steps`` optimizer steps and after the last one.

    Each checkpoint is a ``save_pretrained`` directory of the model and the
    tokenizer (``AutoModel``/``AutoModelForSequenceClassification.from_pretrained``
    load it directly) plus ``attnsim_checkpoint.json``: ``global_step``,
    ``epoch``, and the caller's ``meta`` (base model, labels, run id, ...).
    It is written under a temporary name and renamed when complete, so a crash
    never leaves a half-written ``step-*`` directory.
    """

    def __init__(self, directory: Path, every_n_steps: int, tokenizer: Any, meta: Dict[str, Any], on_save: Optional[Callable[[int, Path], None]] = None):
        super().__init__()
        self.directory = Path(directory)
        self.every_n_steps = every_n_steps
        self.tokenizer = tokenizer
        self.meta = dict(meta)
        self.on_save = on_save
        self.saved: List[Tuple[int, Path]] = []

    def write(self, model: torch.nn.Module, step: int, epoch: int = 0) -> Path:
        """Save ``model`` and the tokenizer as the checkpoint of ``step`` (once per step); return its directory."""
        final = self.directory / checkpoint_name(step)
        if any(s == step for s, _ in self.saved):
            return final
        partial = self.directory / (checkpoint_name(step) + ".tmp")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        model.save_pretrained(partial)
        self.tokenizer.save_pretrained(partial)
        meta = {"global_step": step, "epoch": epoch, **self.meta}
        (partial / CHECKPOINT_META).write_text(json.dumps(meta, indent=2, sort_keys=True))
        partial.rename(final)
        self.saved.append((step, final))
        log.info("saved checkpoint %s", final)
        if self.on_save is not None:
            self.on_save(step, final)
        return final

    def _save(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.write(pl_module.model, int(trainer.global_step), int(trainer.current_epoch))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step > 0 and trainer.global_step % self.every_n_steps == 0:
            self._save(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_step > 0:
            self._save(trainer, pl_module)
