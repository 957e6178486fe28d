"""Interventions on per-head outputs Z: ablation (zero, mean, resample) and activation patching.

Every intervention rewrites Z where the capture reads it (:mod:`attnsim.capture.hooks`): a forward
pre-hook on each layer's output projection W_O (``arch.output``), whose input is the heads' outputs
concatenated, (batch, pos, heads x d_head). The hook replaces the slices of the chosen heads and hands
the projection the edited tensor, so W_O, its bias, the residual stream and everything after run as
the model's own code runs them. Nothing here depends on the family (encoder, decoder, grouped-query
attention: one Z per query head), a Linear or a Conv1D W_O, or the attention implementation.

- zero ablation: Z[l, h] = 0 (so the head adds nothing but W_O's shared bias);
- mean ablation: Z[l, h] = the head's mean Z over the corpus at each position (T, d_head), computed in a
  first pass (:meth:`InterventionModule.predict_step` in phase ``mean``);
- resample ablation: Z[l, h] = the head's Z on another window of the run (a seeded shift within the
  batch, or the previous batch's first window for a batch of one);
- patching: Z[l, h] of the corrupted run = its Z on the clean run.

Hooks are registered in ``try`` and removed in ``finally``: none outlives a call.

The Lightning modules run several forward passes per batch (clean, then one per head set); what is
measured from each pass is injected as a *task* object (:mod:`attnsim.stats.interventions`), as the
plain capture module's view is.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple

import pytorch_lightning as pl
import torch
import torch.nn as nn

from attnsim.capture.architectures import Architecture, layer_modules
from attnsim.capture.hooks import _projection_input, capture_heads, forward_without_cache
from attnsim.capture.load import ModelInfo, load_model
from attnsim.errors import ModelError

Head = Tuple[int, int]

MODES = ("zero", "mean", "resample")


def head_kind(config: Any) -> str:
    """What a checkpoint's head measures, from ``config.architectures``: ``classifier``, ``masked_lm``,
    ``causal_lm`` or ``encoder`` (no head: hidden states only)."""
    names = [str(a) for a in (getattr(config, "architectures", None) or [])]
    if any(n.endswith("ForSequenceClassification") for n in names):
        return "classifier"
    if any(n.endswith(("ForMaskedLM", "ForPreTraining")) for n in names):
        return "masked_lm"
    if any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names):
        return "causal_lm"
    return "encoder"


def load_task_model(
    info: ModelInfo, init: str = "pretrained", seed: int = 0, attn_implementation: str = "auto", dtype: str = "float32"
) -> Tuple[nn.Module, str, Dict[str, str]]:
    """The model with its own head (classifier, masked LM, causal LM) or the bare encoder, in eval mode.

    Args:
        info: from :func:`~attnsim.capture.load.inspect_model`.
        init: ``pretrained`` or ``random`` (the same architecture, weights drawn under ``seed``).
        attn_implementation: ``auto`` loads SDPA (Z is captured before W_O under any implementation).

    Returns:
        (model, kind from :func:`head_kind`, tags ``attnsim.model_init`` and ``attnsim.attn_implementation``).

    Raises:
        ModelError: the weights cannot be loaded.
    """
    import transformers

    kind = head_kind(info.config)
    auto = {
        "classifier": transformers.AutoModelForSequenceClassification,
        "masked_lm": transformers.AutoModelForMaskedLM,
        "causal_lm": transformers.AutoModelForCausalLM,
        "encoder": transformers.AutoModel,
    }[kind]
    # auto: SDPA (no attention probabilities are read; Z is captured before W_O under any implementation)
    model, tags = load_model(info, init, seed, attn_implementation, needs_attention=False, dtype=dtype, auto_class=auto)
    return model, kind, tags


@contextmanager
def replace_heads(model: nn.Module, arch: Architecture, n_heads: int, replacements: Mapping[Head, torch.Tensor]) -> Iterator[None]:
    """Within the block, every forward pass uses ``replacements[(layer, head)]`` as that head's Z.

    Args:
        model: a Hugging Face model whose layers :func:`~attnsim.capture.architectures.layer_modules` finds.
        arch: its architecture entry (``arch.output`` is W_O).
        n_heads: query heads per layer (the heads of W_O's input).
        replacements: (layer, head) -> a tensor broadcastable to (batch, pos, d_head): a scalar 0
            (zero ablation), (pos, d_head) (a per-position mean) or (batch, pos, d_head) (another
            window's or the clean run's Z). An empty mapping registers no hook: the pass is the clean pass.

    Raises:
        ModelError: a layer or head out of range (before any forward pass), or W_O's input is not
        (batch, pos, n_heads x d_head) (during it).
    """
    layers = layer_modules(model, arch)
    by_layer: Dict[int, Dict[int, torch.Tensor]] = {}
    for (layer, head), value in replacements.items():
        if not (0 <= layer < len(layers) and 0 <= head < n_heads):
            raise ModelError(f"Head (layer {layer}, head {head}) does not exist: the model has {len(layers)} layers of {n_heads} heads (0-indexed).")
        by_layer.setdefault(int(layer), {})[int(head)] = value
    handles = []

    def hook_for(index: int, edits: Dict[int, torch.Tensor]):
        where = f"Layer {index} ({arch.layers}.{index}.{arch.output})"

        def pre_hook(_module: nn.Module, args: tuple, kwargs: dict):
            concat = _projection_input(where, args, kwargs)  # (B, T, H*d)
            if concat.dim() != 3 or concat.shape[-1] % n_heads:
                raise ModelError(
                    f"{where}: the input of the output projection W_O has shape {tuple(concat.shape)}, not (batch, tokens, {n_heads} x d_head); the architecture table does not match this model."
                )
            batch, pos, total = concat.shape
            z = concat.reshape(batch, pos, n_heads, total // n_heads).clone()  # (B, T, H, d)
            for head, value in edits.items():
                z[:, :, head, :] = value.to(device=z.device, dtype=z.dtype)
            edited = z.reshape(batch, pos, total)  # (B, T, H*d)
            if args:
                return (edited, *args[1:]), kwargs
            key = "input" if "input" in kwargs else next(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
            return args, {**kwargs, key: edited}

        return pre_hook

    try:
        for index, edits in by_layer.items():
            projection = layers[index].get_submodule(arch.output)
            handles.append(projection.register_forward_pre_hook(hook_for(index, edits), with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def ablation_values(
    heads: Sequence[Head], mode: str, mean: Optional[torch.Tensor] = None, donor: Optional[Sequence[torch.Tensor]] = None
) -> Dict[Head, torch.Tensor]:
    """The replacement Z of each head of a set under an ablation ``mode``.

    Args:
        heads: (layer, head) pairs.
        mode: ``zero``, ``mean`` or ``resample``.
        mean: (layer, head, pos, d_head) corpus-mean Z per position (``mean``).
        donor: per layer, (batch, head, pos, d_head) Z of the donor windows (``resample``).

    Returns:
        (layer, head) -> tensor for :func:`replace_heads`.

    Raises:
        ValueError: an unknown mode, or the mode's input is missing.
    """
    if mode == "zero":
        return {h: torch.zeros(()) for h in heads}
    if mode == "mean":
        if mean is None:
            raise ValueError("mean ablation needs the corpus-mean Z (the first pass)")
        return {(layer, head): mean[layer, head] for layer, head in heads}
    if mode == "resample":
        if donor is None:
            raise ValueError("resample ablation needs the donor windows' Z")
        return {(layer, head): donor[layer][:, head] for layer, head in heads}
    raise ValueError(f"unknown ablation mode {mode!r}; one of {', '.join(MODES)}")


def donor_shift(batch: int, seed: int, batch_idx: int) -> int:
    """The seeded shift (1..batch-1) by which resample ablation takes window ``(b + shift) % batch`` as window b's donor."""
    generator = torch.Generator().manual_seed(int(seed) * 7919 + int(batch_idx))
    return int(torch.randint(1, batch, (1,), generator=generator)) if batch > 1 else 0


class Task(Protocol):
    """What an intervention module measures on each pass (:class:`attnsim.stats.interventions.TaskMetric`)."""

    def inputs(self, batch: Mapping[str, Any]) -> Dict[str, torch.Tensor]: ...

    needs_z: bool  # whether sums() reads both passes' Z (then given as z, clean_z, heads)

    def sums(
        self,
        outputs: Any,
        batch: Mapping[str, Any],
        clean: Any,
        z: Optional[Sequence[torch.Tensor]] = None,
        clean_z: Optional[Sequence[torch.Tensor]] = None,
        heads: Sequence[Head] = (),
    ) -> Tuple[torch.Tensor, torch.Tensor]: ...


class InterventionModule(pl.LightningModule):
    """``predict_step`` runs the clean pass and one ablated pass per head set, and returns their task-metric sums.

    Phase ``mean`` (mean ablation's first pass over the corpus) sums each head's Z per position and
    returns None; phase ``measure`` returns ``{"sums": (passes, M), "counts": (passes, M), "windows": B}``
    (pass 0 clean, then the sets in order; M metrics of :data:`attnsim.stats.interventions.METRICS`).

    Args:
        model: the model with its head (:func:`load_task_model`).
        info: its :class:`~attnsim.capture.load.ModelInfo`.
        head_sets: the head sets ablated, each a list of (layer, head); an empty set is a second clean pass.
        mode: ``zero``, ``mean`` or ``resample``.
        task: builds each pass's inputs and measures its outputs (:class:`Task`).
        labels: (windows,) int64 class of each corpus window (a classifier), looked up by ``batch["index"]``.
        seed: the run's seed (resample's donors).
    """

    def __init__(
        self,
        model: nn.Module,
        info: ModelInfo,
        head_sets: Sequence[Sequence[Head]],
        mode: str,
        task: Task,
        labels: Optional[torch.Tensor] = None,
        seed: int = 0,
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown ablation mode {mode!r}; one of {', '.join(MODES)}")
        self.model = model
        self.info = info
        self.head_sets = [list(s) for s in head_sets]
        self.mode = mode
        self.task = task
        self.seed = seed
        self.phase = "mean" if mode == "mean" else "measure"
        self.register_buffer("labels", labels if labels is not None else torch.zeros(0, dtype=torch.long), persistent=False)
        self.z_sum: Optional[torch.Tensor] = None  # (L, H, T, d) float64 sum over windows (phase mean)
        self.z_count = 0
        self.mean_z: Optional[torch.Tensor] = None
        self.previous: Optional[List[torch.Tensor]] = None  # resample: the last batch's clean Z, per layer

    def _batch(self, batch: Mapping[str, Any]) -> Dict[str, Any]:
        out = dict(batch)
        if self.labels.numel():
            out["labels"] = self.labels[batch["index"].to(self.labels.device)]
        return out

    def finish_mean(self) -> torch.Tensor:
        """End phase ``mean``: the per-position corpus mean Z (layer, head, pos, d_head), kept for phase ``measure``.

        Raises:
            ModelError: the first pass saw no window.
        """
        if self.z_sum is None or self.z_count == 0:
            raise ModelError("Mean ablation's first pass saw no window; the corpus is empty.")
        self.mean_z = (self.z_sum / self.z_count).float()
        self.phase = "measure"
        return self.mean_z

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Any:
        batch = self._batch(batch)
        inputs = self.task.inputs(batch)
        arch, n_heads = self.info.arch, self.info.n_heads
        if self.phase == "mean":
            with capture_heads(self.model, arch, n_heads) as store:
                forward_without_cache(self.model, **inputs)
            total = torch.stack([z.double().sum(0) for z in store])  # L x (B, H, T, d) -> (L, H, T, d)
            self.z_sum = total if self.z_sum is None else self.z_sum + total
            self.z_count += int(inputs["input_ids"].shape[0])
            return None
        with capture_heads(self.model, arch, n_heads) as store:
            clean = forward_without_cache(self.model, **inputs)
        sums, counts = [], []
        needs_z = bool(getattr(self.task, "needs_z", False))
        z_kwargs = {"z": store, "clean_z": store} if needs_z else {}
        s, c = self.task.sums(clean, batch, clean, **z_kwargs)
        sums.append(s)
        counts.append(c)
        donor = None
        if self.mode == "resample":
            size = store[0].shape[0]
            if size > 1:
                shift = donor_shift(size, self.seed, batch_idx)
                donor = [torch.roll(z, -shift, dims=0) for z in store]  # window b takes window (b + shift) % B
            elif self.previous is not None:
                donor = [p[:1] for p in self.previous]
            else:
                raise ModelError(
                    "Resample ablation needs at least two windows (a window's donor is another window); the corpus has one. Use interventions.mode=zero or mean, or more windows."
                )
            self.previous = [z.detach() for z in store]
        for heads in self.head_sets:
            values = ablation_values(heads, self.mode, self.mean_z, donor)
            if needs_z:  # the other heads' Z under the ablation (the capture hooks run before the edit; the ablated heads are left out)
                with capture_heads(self.model, arch, n_heads) as ablated, replace_heads(self.model, arch, n_heads, values):
                    out = forward_without_cache(self.model, **inputs)
                s, c = self.task.sums(out, batch, clean, z=ablated, clean_z=store, heads=heads)
            else:
                with replace_heads(self.model, arch, n_heads, values):
                    out = forward_without_cache(self.model, **inputs)
                s, c = self.task.sums(out, batch, clean)
            sums.append(s)
            counts.append(c)
        return {"sums": torch.stack(sums), "counts": torch.stack(counts), "windows": int(inputs["input_ids"].shape[0])}


class PatchingModule(pl.LightningModule):
    """Activation patching: per batch of prompt pairs, the clean and corrupted passes and one corrupted pass
    per head with that head's Z taken from the clean run.

    ``predict_step`` returns ``{"clean": (B,), "corrupted": (B,), "patched": (L, H, B)}`` logit differences
    (answer logit minus wrong-answer logit, at each pair's read-out position; a classifier's class logits).

    Batches (:class:`attnsim.data.prompt_pairs.PromptPairDataModule`): ``clean_ids``, ``corrupted_ids``, ``attention_mask``
    (B, T) int64, ``position`` (B,) read-out position, ``answer`` and ``wrong`` (B,) token or class ids.
    """

    def __init__(self, model: nn.Module, info: ModelInfo, kind: str):
        super().__init__()
        self.model = model
        self.info = info
        self.kind = kind

    def logit_diff(self, outputs: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B,) answer logit minus wrong-answer logit at each pair's read-out position."""
        logits = outputs.logits
        if logits.dim() == 3:  # (B, T, V) -> (B, V) at each read-out position
            logits = logits[torch.arange(logits.shape[0], device=logits.device), batch["position"]]
        rows = torch.arange(logits.shape[0], device=logits.device)
        return (logits[rows, batch["answer"]] - logits[rows, batch["wrong"]]).double()

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Any:
        arch, n_heads = self.info.arch, self.info.n_heads
        mask = batch["attention_mask"]
        with capture_heads(self.model, arch, n_heads) as store:
            clean = self.logit_diff(forward_without_cache(self.model, input_ids=batch["clean_ids"], attention_mask=mask), batch)
        corrupted_inputs = {"input_ids": batch["corrupted_ids"], "attention_mask": mask}
        corrupted = self.logit_diff(forward_without_cache(self.model, **corrupted_inputs), batch)
        patched = torch.empty(len(store), n_heads, clean.shape[0], dtype=torch.float64, device=clean.device)
        for layer, z in enumerate(store):
            for head in range(n_heads):
                with replace_heads(self.model, arch, n_heads, {(layer, head): z[:, head]}):
                    patched[layer, head] = self.logit_diff(forward_without_cache(self.model, **corrupted_inputs), batch)
        return {"clean": clean, "corrupted": corrupted, "patched": patched}
