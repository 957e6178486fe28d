"""Progress bars count optimizer steps (fit) and windows (predict, validation), not epochs and batches."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from attnsim.progress import BAR_FORMAT, AttnsimProgressBar, windows_done, windows_total


class Tiny(pl.LightningModule):
    """One linear layer; enough for Lightning to run fit, validate and predict loops."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.layer(x).pow(2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val/loss", self.layer(x).pow(2).mean())

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(n: int, batch_size: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 3)), batch_size=batch_size)


def trainer(bar: AttnsimProgressBar, **kwargs) -> pl.Trainer:
    kwargs.setdefault("logger", False)
    return pl.Trainer(accelerator="cpu", enable_checkpointing=False, enable_model_summary=False, callbacks=[bar], **kwargs)


def test_fit_bar_counts_optimizer_steps_of_max_steps_across_epochs(capsys, tmp_path):
    bar = AttnsimProgressBar()
    # 3 batches per epoch, 2 batches per optimizer step, max_epochs=-1: 7 steps span 5 epochs
    fit = trainer(
        bar, logger=pl.loggers.CSVLogger(tmp_path), max_steps=7, max_epochs=-1, accumulate_grad_batches=2, num_sanity_val_steps=0, check_val_every_n_epoch=1
    )
    fit.fit(Tiny(), loader(6, 2), loader(5, 2))
    train = bar.train_progress_bar
    assert fit.global_step == 7 and fit.current_epoch >= 4
    assert (train.n, train.total, train.unit, train.desc) == (7, 7, "step", "Fine-tuning")
    assert "Fine-tuning: 7/7 steps" in str(train) and "train/loss=" in str(train) and "v_num" not in str(train)
    val = bar.val_progress_bar  # the last validation: 5 windows in batches of 2
    assert (val.n, val.total, val.unit) == (5, 5, "window")
    out = capsys.readouterr().out
    assert "Epoch" not in out and "/-" not in out


def test_predict_bar_counts_windows_with_the_run_name():
    bar = AttnsimProgressBar("step-000050")
    trainer(bar).predict(Tiny(), loader(10, 4), return_predictions=False)
    predict = bar.predict_progress_bar
    assert (predict.n, predict.total, predict.unit) == (10, 10, "window")
    assert str(predict).startswith("step-000050: 10/10 windows")


def test_slow_windows_show_seconds_per_window_not_zero_per_second():
    line = Tqdm.format_meter(n=2, total=10, elapsed=600.0, unit="window", prefix="csm", bar_format=BAR_FORMAT)
    assert "300.00s/window" in line and "0.00window/s" not in line
    fast = Tqdm.format_meter(n=40, total=100, elapsed=10.0, unit="window", prefix="csm", bar_format=BAR_FORMAT)
    assert fast.startswith("csm: 40/100 windows") and "4.00window/s" in fast


def test_windows_total_and_done_follow_the_sampler_and_batch_limit():
    data = loader(10, 4)
    assert windows_total(data, 3) == 10 and windows_total(data, float("inf")) == 10 and windows_total(data, 1) == 4
    assert [windows_done(i, data, 10) for i in range(3)] == [4, 8, 10]
    share = DataLoader(TensorDataset(torch.randn(10, 3)), batch_size=4, sampler=DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=False))
    assert windows_total(share, 2) == 5  # this process's share of the windows
    assert windows_total(DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=None), 4) is None


def test_runner_and_finetune_use_the_counting_bar(tiny_bert, text_dir, tracking_uri, tmp_path, capsys):
    from attnsim.config import load_config
    from attnsim.workflows.finetune import finetune
    from attnsim.workflows.loop import make_trainer
    from tests.helpers.runs import tiny_fit

    cfg = load_config("csm", ["trainer.batch_size=2"])
    assert isinstance(make_trainer(cfg, [], description="csm").progress_bar_callback, AttnsimProgressBar)
    assert make_trainer(load_config("csm", ["trainer.progress_bar=false"]), []).progress_bar_callback is None
    capsys.readouterr()
    overrides = [o for o in tiny_fit(tiny_bert, tmp_path / "ckpt", steps=3, every=3) if not o.startswith("trainer.progress_bar")]
    finetune("finetune_bbc", overrides)
    out = capsys.readouterr().out
    assert "Fine-tuning: 3/3 steps" in out and "Epoch" not in out
