"""Finding ``logit_lens``: every layer's residual stream through the model's own final norm and unembedding.

Arithmetic: :mod:`attnsim.stats.logit_lens`. Per layer (logged as layer values, one column): ``loss`` (next-token
cross-entropy, nats), ``accuracy`` (top-1), ``agreement`` (top-1 equals the last layer's). The run's metrics
``logit_lens/final_loss`` and ``logit_lens/final_accuracy`` are the last layer's, i.e. the model's own.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.stats.logit_lens import LensSums, lens_update

#: positions per vocabulary-sized block of logits (memory: CHUNK x vocab float32; SmolLM2: 48 MiB)
CHUNK = 256


class LogitLensFinding(Finding):
    """Per layer: the logit lens's next-token loss, top-1 accuracy and agreement with the last layer."""

    name = "logit_lens"
    description = "logit lens: each layer's residual stream through the final norm and unembedding; next-token loss and top-1 accuracy by layer"
    statistics = ("loss", "accuracy", "agreement")
    residual = ("resid_post",)

    def build(self):
        return {"lens": LensSums(self.n_layers)}

    def update(self, batch: Any) -> None:
        """Fold one :class:`~attnsim.capture.residual.ResidualBatch` (every layer's ``resid_post`` at its valid positions)."""
        r, valid = batch.readout, batch.valid
        streams = [layer[valid] for layer in batch.record.tensors["resid_post"]]
        self.accumulators["lens"].update(lens_update(streams, batch.targets[valid], r.gain, r.bias, r.centred, r.eps, r.w_u, r.b_u, CHUNK))
        self.windows += batch.batch_size

    def summarise(self) -> Summary:
        summary = super().summarise()
        summary.metrics["final_loss"] = float(summary.scalars["loss"][-1, 0])
        summary.metrics["final_accuracy"] = float(summary.scalars["accuracy"][-1, 0])
        return summary

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        import matplotlib.pyplot as plt

        loss = summary.scalars["loss"][:, 0].tolist()
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot(range(len(loss)), loss, marker="o")
        ax.axhline(loss[-1], color="grey", linestyle=":", label="last layer (the model's loss)")
        ax.set_xlabel("layer (resid_post)")
        ax.set_ylabel("next-token loss (nats)")
        ax.set_title("logit lens: loss by layer")
        ax.legend(fontsize=8)
        fig.tight_layout()
        yield "figures/logit_lens/loss_by_layer.png", fig
