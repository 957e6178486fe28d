"""Residual-stream runs (``dla``, ``logit_lens``): a causal LM with its head, the capture record of each batch.

The model is loaded with its LM head (``AutoModelForCausalLM``) and wrapped in
:class:`~attnsim.capture.residual.ResidualModule`, which hands each batch's record (the names the findings declare in
``residual``), σ of the final norm and the model's readout to the findings.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from attnsim.errors import ConfigError
from attnsim.workflows.kinds.base import MeasurementKind


def check_residual(info: Any, finding_types: Sequence[type]) -> None:
    """Refuse residual-stream findings beside plain-capture findings, or on a model that is not a causal LM, and findings
    that add heads' results to the stream (``dla``) on a model that norms them first (``Architecture.sandwich_norm``).

    Raises:
        ConfigError: naming the fix.
    """
    names = [kind.name for kind in finding_types]
    residual = [kind.name for kind in finding_types if getattr(kind, "residual", ())]
    if len(residual) != len(names):
        raise ConfigError(
            f"findings={names}: {', '.join(residual)} read the residual stream of a causal LM with its head, and cannot share a run with "
            f"findings of the attention capture. Run them apart, e.g. `attnsim run {residual[0]}` and `attnsim run csm` as two runs."
        )
    if not info.causal or not getattr(info.arch, "final_norm", ""):
        kind = str(info.kind).replace("_", "-")
        raise ConfigError(
            f"{', '.join(residual)} need a causal language model with a final norm and an LM head (GPT-2, GPT-NeoX, Llama family, OPT, Phi); "
            f"'{info.name}' is not one ({'an' if kind[0] in 'aeiou' else 'a'} {kind}, model type {info.model_type}). Use e.g. model.path=smollm2."
        )
    per_head = [kind.name for kind in finding_types if "result" in getattr(kind, "residual", ())]
    if per_head and getattr(info.arch, "sandwich_norm", False):
        raise ConfigError(
            f"{', '.join(per_head)} add each head's output Z · W_O to the residual stream, but '{info.name}' (model type {info.model_type}) norms "
            "the attention's output before adding it, so the heads' outputs are not its writes and the attribution would not hold. "
            "Run it on a model without such norms (e.g. model.path=smollm2); logit_lens reads the stream itself and runs on this model."
        )


class ResidualRun(MeasurementKind):
    """The inner kind's windows (text) through the residual-stream capture of a causal LM.

    Args:
        inner: the kind whose tokenizer and windows are read (:class:`~attnsim.workflows.kinds.text.TextRun`).
        names: the capture record's names the findings read.
    """

    name = "residual"
    examples = False  # its batches are not the attention capture's

    def __init__(self, inner: MeasurementKind, names: Sequence[str]):
        self.inner = inner
        self.names = tuple(names)

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The inner kind's tokenizer and windows."""
        return self.inner.inputs(cfg, info)

    def load(self, prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
        """The causal LM with its head (SDPA: no attention probabilities are read) in a :class:`~attnsim.capture.residual.ResidualModule`."""
        from transformers import AutoModelForCausalLM

        from attnsim.capture.load import load_model
        from attnsim.capture.residual import ResidualModule

        cfg, info = prepared.cfg, prepared.info
        impl = "sdpa" if str(cfg.model.attn_implementation) == "auto" else cfg.model.attn_implementation
        model, tags = load_model(info, cfg.model.init, cfg.seed, impl, False, cfg.model.dtype, auto_class=AutoModelForCausalLM)
        self.inner.check_model(model, prepared.corpus)
        return ResidualModule(model, info, self.names), tags

    def __repr__(self) -> str:
        return f"ResidualRun({self.inner!r}, names={list(self.names)})"


__all__ = ["ResidualRun", "check_residual"]
