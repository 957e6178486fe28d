"""Terminal progress bars of attnsim's Lightning loops, counting what a run is made of.

Lightning's default bar (Rich, when ``rich`` is installed) counts batches and
epochs: a fine-tuning with ``max_epochs=-1`` and ``max_steps`` reads
"Epoch 1/-2", and a predict whose batches take longer than Rich's 30-second
speed window reads "0.00it/s". :class:`AttnsimProgressBar` instead shows

- fit: optimizer steps, ``Fine-tuning: 120/300 steps``, the trainer's
  ``global_step`` out of ``max_steps`` (across epochs, whatever the batch
  count per epoch or gradient accumulation), with the logged metrics;
- predict and validation: windows, ``csm: 48/512 windows``, the windows of
  the batches done out of the windows the dataloader serves (on this process),
  and the rate as windows per second, or seconds per window when slower than
  one a second (never a rounded-down ``0.00``).

It is a :class:`pytorch_lightning.callbacks.TQDMProgressBar` (tqdm, printed
to stdout).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional

from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm

# {rate_fmt}: "4.80window/s", or "12.30s/window" when under one per second
BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit}s |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
# when the total is unknown (an iterable dataloader)
BAR_FORMAT_OPEN = "{desc}: {n_fmt} {unit}s [{elapsed}, {rate_fmt}{postfix}]"


def _loader(loaders: Any, dataloader_idx: int) -> Any:
    if isinstance(loaders, (list, tuple)):
        return loaders[dataloader_idx] if dataloader_idx < len(loaders) else None
    if isinstance(loaders, dict):
        values = list(loaders.values())
        return values[dataloader_idx] if dataloader_idx < len(values) else None
    return loaders


def _batch_size(loader: Any) -> Optional[int]:
    # Lightning rebuilds eval loaders around a batch sampler, leaving DataLoader.batch_size None
    return getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", None)


def windows_total(loader: Any, batches: Any) -> Optional[int]:
    """Windows that ``loader`` serves on this process, at most ``batches`` batches of them.

    Args:
        loader: a ``torch.utils.data.DataLoader`` (its sampler's length is this process's
            share under distributed sampling).
        batches: the batches Lightning will run from it (``inf``/None: unknown).

    Returns:
        The number of windows, None when the loader has no length or no fixed batch size.
    """
    batch_size = _batch_size(loader)
    size = None
    for source in (getattr(loader, "sampler", None), getattr(loader, "dataset", None)):
        try:
            size = len(source)
            break
        except TypeError:
            continue
    if size is None or not batch_size:
        return None
    if getattr(getattr(loader, "batch_sampler", None), "drop_last", False):
        size -= size % batch_size
    if batches is not None and not (isinstance(batches, float) and math.isinf(batches)):
        size = min(size, int(batches) * batch_size)
    return size


def windows_done(batch_idx: int, loader: Any, total: Optional[int]) -> int:
    """Windows in batches ``0..batch_idx`` of ``loader`` (batches of ``loader.batch_size``, the last one short)."""
    done = (batch_idx + 1) * (_batch_size(loader) or 1)
    return min(done, total) if total is not None else done


class AttnsimProgressBar(TQDMProgressBar):
    """tqdm bars counting optimizer steps (fit) and windows (predict, validation). See the module docstring.

    Args:
        description: name of the predict bar (e.g. the run name); default ``Predicting``.
        refresh_rate: redraw every this many batches (the last one is always drawn).
    """

    def __init__(self, description: Optional[str] = None, refresh_rate: int = 1):
        super().__init__(refresh_rate=refresh_rate)
        self.description = description
        self._eval_total: Optional[int] = None

    @property
    def predict_description(self) -> str:
        return self.description or "Predicting"

    # -- bars ---------------------------------------------------------------------------
    def _bar(self, desc: str, unit: str, total: Optional[int], leave: bool, position: int) -> Tqdm:
        return Tqdm(
            desc=desc,
            total=total,
            unit=unit,
            position=position,
            disable=self.is_disabled,
            leave=leave,
            dynamic_ncols=True,
            smoothing=0,  # the rate is work done / time since the bar started
            file=sys.stdout,
            bar_format=BAR_FORMAT if total is not None else BAR_FORMAT_OPEN,
        )

    def init_train_tqdm(self) -> Tqdm:
        steps = self.trainer.max_steps
        return self._bar("Fine-tuning", "step", steps if steps and steps > 0 else None, True, 2 * self.process_position)

    @staticmethod
    def _first_total(loaders: Any, batches: Any) -> Optional[int]:
        """Windows of the first dataloader (the bar's total before its first batch)."""
        if isinstance(batches, list):
            batches = batches[0] if batches else None
        return windows_total(_loader(loaders, 0), batches)

    def init_predict_tqdm(self) -> Tqdm:
        total = self._first_total(self.trainer.predict_dataloaders, self.trainer.num_predict_batches)
        return self._bar(self.predict_description, "window", total, True, 2 * self.process_position)

    def init_validation_tqdm(self) -> Tqdm:
        trainer = self.trainer
        main_bar = trainer.state.fn != "validate"  # below the fit bar, and cleared after
        total = self._first_total(trainer.val_dataloaders, trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches)
        return self._bar(self.validation_description, "window", total, not main_bar, 2 * self.process_position + main_bar)

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict:
        """The metrics logged with ``prog_bar=True``, without Lightning's ``v_num`` (the logger's version)."""
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items

    def _show(self, bar: Any, n: int, total: Optional[int] = None) -> None:
        if bar is None or bar.disable:
            return
        if total is not None and bar.total != total:
            bar.total = total
            bar.bar_format = BAR_FORMAT
        bar.n = n
        bar.refresh()

    # -- fit: optimizer steps -------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.train_progress_bar = self.init_train_tqdm()
        self._show(self.train_progress_bar, int(trainer.global_step))

    def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
        pass  # one bar over all epochs (Lightning's restarts a bar per epoch)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self.train_progress_bar
        step = int(trainer.global_step)
        if bar is not None and not bar.disable and self._should_update(step, bar.total):
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            self._show(bar, step)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.train_progress_bar is not None and not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    # -- predict and validation: windows -------------------------------------------
    def _start_eval(self, bar: Any, loaders: Any, batches: Any, dataloader_idx: int) -> None:
        loader = _loader(loaders, dataloader_idx)
        if isinstance(batches, list):
            batches = batches[dataloader_idx] if dataloader_idx < len(batches) else None
        self._eval_total = windows_total(loader, batches)
        bar.reset(total=self._eval_total)
        bar.bar_format = BAR_FORMAT if self._eval_total is not None else BAR_FORMAT_OPEN

    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.has_dataloader_changed(dataloader_idx) and not self.predict_progress_bar.disable:
            self._start_eval(self.predict_progress_bar, trainer.predict_dataloaders, trainer.num_predict_batches, dataloader_idx)

    def on_predict_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._should_update(batch_idx + 1, self.total_predict_batches_current_dataloader):
            loader = _loader(trainer.predict_dataloaders, dataloader_idx)
            self._show(self.predict_progress_bar, windows_done(batch_idx, loader, self._eval_total))

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.has_dataloader_changed(dataloader_idx) and not self.val_progress_bar.disable:
            batches = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
            self._start_eval(self.val_progress_bar, trainer.val_dataloaders, batches, dataloader_idx)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._should_update(batch_idx + 1, self.total_val_batches_current_dataloader):
            loader = _loader(trainer.val_dataloaders, dataloader_idx)
            self._show(self.val_progress_bar, windows_done(batch_idx, loader, self._eval_total))


__all__ = ["AttnsimProgressBar", "windows_total", "windows_done", "BAR_FORMAT"]
