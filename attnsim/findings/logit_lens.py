"""Finding ``logit_lens``: every layer's residual stream through the model's own final norm and unembedding.

Arithmetic: :mod:`attnsim.stats.logit_lens`. Per layer (logged as layer values, one column): ``loss`` (next-token
cross-entropy, nats), ``accuracy`` (top-1), ``agreement`` (top-1 equals the last layer's). The run's metrics
``logit_lens/final_loss`` and ``logit_lens/final_accuracy`` are the last layer's, i.e. the model's own.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Tuple

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


def trace_lens(t: Any, model: Any = "smollm2", position: int = -1, k: int = 5, text: int = 0) -> List[List[Tuple[str, float]]]:
    """The logit lens at one position of a trace: each layer's top ``k`` next tokens and their probabilities.

    Example:

        >>> import attnsim
        >>> t = attnsim.trace("The Eiffel Tower is in the city of", model="smollm2", names=["resid_post"])
        >>> top = trace_lens(t, "smollm2")
        >>> len(top)  # one entry per layer
        30
        >>> top[-1][0][0]  # the model's own most probable next token
        'ĠParis'

    Args:
        t: a :class:`~attnsim.capture.record.Trace` holding ``resid_post``.
        model: the ``model.path`` the trace was captured from, or the loaded causal LM (its final norm and unembedding
            are applied, with the stream's own scale: :func:`attnsim.stats.logit_lens.apply_norm`).
        position: the position read (negative counts from the end of the text's real tokens).
        k: tokens per layer. text: which text of the batch.

    Returns:
        Per layer (first to last), ``k`` pairs (token string, probability), most probable first; the last layer's are the
        model's own next-token probabilities.

    Raises:
        KeyError: the trace lacks ``resid_post``. ModelError: the model is not a causal LM with a declared final norm.
    """
    import torch

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.residual import readout_of
    from attnsim.capture.trace import _loaded
    from attnsim.stats.logit_lens import apply_norm

    loaded, tokenizer = _loaded(str(model), False)[1:] if isinstance(model, str) else (model, None)
    r = readout_of(loaded, architecture_for(loaded.config.model_type))
    real = int(t.mask[text].sum())
    index = position if position >= 0 else real + position
    streams = torch.stack([t["resid_post", layer][text, index].cpu() for layer in range(t.n_layers)])  # (layer, d_model)
    logits = apply_norm(streams, r.gain, r.bias, r.centred, r.eps) @ r.w_u.T + (r.b_u if r.b_u is not None else 0.0)
    probs, ids = logits.softmax(-1).topk(k, dim=-1)
    name = tokenizer.convert_ids_to_tokens if tokenizer is not None else (lambda row: [str(i) for i in row])
    return [list(zip(name(row), p)) for row, p in zip(ids.tolist(), probs.tolist())]
