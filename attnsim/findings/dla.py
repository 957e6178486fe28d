"""Finding ``dla``: direct logit attribution, each head's direct effect on the logit of the actual next token.

Arithmetic and conventions: :mod:`attnsim.stats.dla` (final norm's scale frozen from the clean pass, the norm's
weight folded into W_U, baseline: the mean logit over the vocabulary). Per head: ``dla_mean``, ``dla_std``,
``dla_positive_share``. The run's sanity metric ``dla/decomposition_error`` is the relative difference between
the sum of every direct component (embeddings, every head, W_O biases, every MLP, the norm's bias and b_U) and
the model's own logit of the same token; it is float32 rounding (about 1e-7) when the decomposition holds.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple

import torch

from attnsim.errors import ConfigError, ModelError
from attnsim.findings.base import Finding, Summary
from attnsim.plots.common import layer_head_heatmap
from attnsim.stats.dla import Decomposition, HeadAttribution, head_attribution, readout_directions, stream_attribution


def contrast_token(text: Optional[str], tokenizer: Any) -> Optional[int]:
    """The token id of ``stats.dla_contrast``: None for the mean-logit baseline, else the one token ``text`` encodes to.

    Raises:
        ConfigError: ``text`` is not exactly one token of ``tokenizer`` (the message lists the tokens it gives).
    """
    if text is None:
        return None
    ids = tokenizer(str(text), add_special_tokens=False)["input_ids"] if tokenizer is not None else []
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids) if tokenizer is not None else []
        raise ConfigError(
            f"Config key 'stats.dla_contrast' is {text!r}, which the model's tokenizer splits into {len(ids)} tokens {pieces}; "
            'give a text that is exactly one token (with its leading space where the tokenizer marks one: on the command line "stats.dla_contrast= the"), or null.'
        )
    return int(ids[0])


class DLAFinding(Finding):
    """Per head: mean, spread and share of positive direct logit attribution to the actual next token."""

    name = "dla"
    description = "direct logit attribution: each head's direct effect on the actual next token's logit (final norm's scale frozen, mean-logit baseline)"
    statistics = ("dla_mean", "dla_std", "dla_positive_share")
    residual = ("result", "mlp_out", "resid_pre")
    config_keys = ("stats.dla_contrast",)

    def build(self):
        self.contrast = contrast_token(getattr(self.cfg, "dla_contrast", None), self.context.tokenizer)
        return {"heads": HeadAttribution(self.n_layers, self.n_heads), "check": Decomposition()}

    def update(self, batch: Any) -> None:
        """Fold one :class:`~attnsim.capture.residual.ResidualBatch`: the heads' DLA and the decomposition check."""
        readout, valid = batch.readout, batch.valid
        targets = batch.targets[valid]
        w_target = readout.w_u[targets]  # (N, d_model): only the target tokens' rows, never (pos, vocab)
        sigma = batch.sigma[valid]
        record = batch.record.tensors
        w_base = readout.w_u.mean(0) if self.contrast is None else readout.w_u[self.contrast]
        baseline = readout_directions(w_target, readout.gain, readout.centred, sigma, w_base)
        self.accumulators["heads"].update(head_attribution(record["result"], valid, baseline))
        raw = readout_directions(w_target, readout.gain, readout.centred, sigma)
        summed = head_attribution(record["result"], valid, raw).sum((0, 1))
        summed = summed + stream_attribution([record["resid_pre"][0], *record["mlp_out"]], valid, raw).sum(0)
        summed = summed + raw @ batch.attn_bias.float().sum(0)
        summed = summed + self._constant(readout, w_target, targets)
        final = record["resid_post"][-1][valid]
        with torch.no_grad():
            logit = (readout.norm(final).float() * w_target).sum(-1) + (readout.b_u[targets] if readout.b_u is not None else 0.0)
        self.accumulators["check"].update(summed, logit)
        self.windows += batch.batch_size

    @staticmethod
    def _constant(readout: Any, w_target: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The components that are no layer's: the norm's bias through W_U and the unembedding's bias, (N,)."""
        out = w_target.new_zeros(w_target.shape[0])
        if readout.bias is not None:
            out = out + w_target @ readout.bias
        if readout.b_u is not None:
            out = out + readout.b_u[targets]
        return out

    def summarise(self) -> Summary:
        summary = super().summarise()
        check = self.accumulators["check"].compute()
        summary.metrics["decomposition_error"] = float(check["decomposition_error"])
        summary.metrics["positions"] = float(check["positions"])
        return summary

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield (
            "figures/dla/dla_mean.png",
            layer_head_heatmap(summary.scalars["dla_mean"], "direct logit attribution to the actual next token (mean over positions, logits)", cmap="RdBu_r"),
        )


def trace_dla(t: Any, model: Any = "smollm2", contrast: Optional[int] = None) -> torch.Tensor:
    """Every head's direct logit attribution to each position's actual next token, from a trace of a causal LM.

    Example (head 17.8's direct effect at every position is ``dla[0, :, 17, 8]``):

        >>> import attnsim
        >>> t = attnsim.trace("The cat sat on the mat. The cat", model="smollm2", names=["result", "resid_post"])
        >>> dla = trace_dla(t, model="smollm2")
        >>> tuple(dla.shape)  # (batch, pos, layer, head)
        (1, 9, 30, 9)
        >>> bool(dla[0, -1].isnan().all())  # the last position has no next token in the text
        True

    Args:
        t: a :class:`~attnsim.capture.record.Trace` holding ``result`` and ``resid_post``.
        contrast: a token id whose logit is the baseline (each head's effect on the next token's logit minus its effect
            on this token's), instead of the mean logit over the vocabulary.
        model: the ``model.path`` the trace was captured from (its loaded model is reused when the trace kept no
            ``pattern``; a trace with ``pattern`` ran eager attention, and the model is loaded once more) or the loaded model.

    Returns:
        (batch, pos, layer, head) float32, the conventions of :mod:`attnsim.stats.dla` (final norm's scale of the
        trace's own pass, mean-logit baseline); NaN where a position has no real next token.

    Raises:
        KeyError: the trace lacks ``result`` or ``resid_post``.
        ModelError: the model is not a causal LM with a declared final norm, or norms the attention's output before the
            residual add (Gemma 3).
    """
    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.residual import next_tokens, readout_of
    from attnsim.capture.trace import _loaded

    loaded = _loaded(str(model), False)[1] if isinstance(model, str) else model
    arch = architecture_for(loaded.config.model_type)
    if getattr(arch, "sandwich_norm", False):
        raise ModelError(
            f"Model type '{loaded.config.model_type}' norms the attention's output before adding it to the residual stream, so the heads' "
            "results are not its writes and direct logit attribution does not hold; use a model without such norms."
        )
    readout = readout_of(loaded, arch)
    targets, valid = next_tokens(t.tokens.cpu(), t.mask.cpu())
    results = [t["result", layer].cpu() for layer in range(t.n_layers)]
    sigma = readout.scale(t["resid_post", -1].cpu())[valid]
    w_target = readout.w_u[targets[valid]]
    baseline = readout.w_u.mean(0) if contrast is None else readout.w_u[int(contrast)]
    values = head_attribution(results, valid, readout_directions(w_target, readout.gain, readout.centred, sigma, baseline))
    out = torch.full((*valid.shape, t.n_layers, values.shape[1]), float("nan"))
    out[valid] = values.permute(2, 0, 1)
    return out
