"""The capture record of :func:`attnsim.trace`: per-layer tensors in TransformerLens's names and axis orders.

A :class:`Trace` holds, for one batch of texts, the tensors named in :data:`NAMES` (each a list of one
tensor per layer), the token ids, their strings, the padding mask and (for a model with an LM head) the
logits. ``t["pattern", 3]`` reads layer 3's attention probabilities, as TransformerLens's
``ActivationCache`` does (``cache["pattern", 3]``).

A record is saved to one safetensors file (:meth:`Trace.save`): every tensor under ``<name>.<layer>``
(plus ``tokens``, ``mask`` and ``logits``), and a JSON header (the model, the names, the token strings,
what each name means) in the file's metadata under the key ``attnsim.trace``. :meth:`Trace.load` reads it
back; :meth:`Trace.log_artifact` logs the file to an MLflow run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from attnsim.errors import ConfigError

NAMES: Dict[str, str] = {
    "pattern": "(batch, head, query, key) attention probabilities; 4·B·H·T² bytes per layer (float32)",
    "z": "(batch, pos, head, d_head) each head's output before W_O; 4·B·T·H·d_head bytes per layer",
    "result": "(batch, pos, head, d_model) each head's output through its slice of W_O (z · W_O[h], no bias); 4·B·T·H·d_model bytes per layer",
    "attn_out": "(batch, pos, d_model) the attention block's output, W_O's output with its bias; 4·B·T·d_model bytes per layer",
    "mlp_out": "(batch, pos, d_model) the MLP's write to the residual stream; 4·B·T·d_model bytes per layer",
    "resid_pre": "(batch, pos, d_model) the layer's input; 4·B·T·d_model bytes per layer",
    "resid_mid": "(batch, pos, d_model) resid_pre + attn_out; 4·B·T·d_model bytes per layer",
    "resid_post": "(batch, pos, d_model) the layer's output; 4·B·T·d_model bytes per layer",
}
"""Every per-layer name a trace can hold -> its shape and its memory (float32; B texts of T tokens, H heads)."""

HEADER_KEY = "attnsim_trace"
"""The key of the JSON header in a saved trace's safetensors metadata."""

FORMAT = 1
"""Version of the saved file's layout; :meth:`Trace.load` refuses another."""


def check_names(names: Optional[Sequence[str]]) -> Tuple[str, ...]:
    """The names to capture: all of :data:`NAMES` for None, else ``names`` in :data:`NAMES`' order.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    if names is None:
        return tuple(NAMES)
    if isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ConfigError(f"attnsim.trace cannot capture {unknown}. Give names among {', '.join(NAMES)} (or names=None for all of them).")
    return tuple(n for n in NAMES if n in names)


@dataclass
class Trace:
    """One forward pass of a batch of texts, captured in the field's names.

    Attributes:
        tensors: name -> L tensors, one per layer, in the shapes of :data:`NAMES` (layer 0 first).
        tokens: (batch, pos) token ids (int64). For an encoder–decoder, the decoder's tokens: its input is
            ``tokens`` shifted right by one (teacher forcing), so position i reads tokens < i.
        str_tokens: per text, the token strings (padding included).
        mask: (batch, pos) 1 for real tokens, 0 for padding (texts are padded on the right).
        logits: (batch, pos, vocab) the LM head's output, or None (a model without one). A decoder's position i
            predicts token i + 1; an encoder–decoder's decoder position i predicts token i.
        meta: the model (``model``, ``model_type``, ``kind``, ``n_layers``, ``n_heads``, ``d_head``, ``d_model``)
            and what the names mean for this family (``conventions``).
    """

    tensors: Dict[str, List[torch.Tensor]]
    tokens: torch.Tensor
    str_tokens: List[List[str]]
    mask: torch.Tensor
    logits: Optional[torch.Tensor] = None
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> Tuple[str, ...]:
        """The names this record holds."""
        return tuple(self.tensors)

    @property
    def n_layers(self) -> int:
        """Number of layers (of the decoder, for an encoder–decoder)."""
        return int(self.meta.get("n_layers", 0))

    def __getitem__(self, key: Tuple[str, int]) -> torch.Tensor:
        """``t["z", 3]``: layer 3's tensor of name ``z`` (negative layers count from the end).

        Raises:
            KeyError: the name was not captured (say it in ``names=``) or the layer is out of range.
        """
        if not (isinstance(key, tuple) and len(key) == 2):
            raise KeyError(f"Index a trace as t[name, layer], e.g. t['pattern', 0]; got {key!r}.")
        name, layer = key
        if name not in self.tensors:
            known = ", ".join(self.tensors) or "none"
            raise KeyError(f"This trace holds no '{name}' (it holds {known}). Capture it with attnsim.trace(..., names=[..., '{name}']).")
        layers = self.tensors[name]
        if not -len(layers) <= int(layer) < len(layers):
            raise KeyError(f"Layer {layer} is outside the model's {len(layers)} layers (0 to {len(layers) - 1}).")
        return layers[int(layer)]

    def stack(self, name: str) -> torch.Tensor:
        """All layers of ``name`` stacked: (layer, *shape of one layer)."""
        return torch.stack([self[name, layer] for layer in range(len(self.tensors.get(name, ())) or self.n_layers)])

    def save(self, path: "str | Path") -> Path:
        """Write the record to one safetensors file (tensors, plus the JSON header in its metadata); returns the path.

        The file holds ``<name>.<layer>`` tensors (copies: a layer's resid_post and the next one's resid_pre are one tensor in memory), ``tokens``, ``mask`` and
        ``logits`` when present; the metadata key :data:`HEADER_KEY` holds the JSON of ``meta``, the names,
        the token strings and :data:`FORMAT`.
        """
        from safetensors.torch import save_file

        flat = {
            f"{name}.{layer}": t.detach().cpu().clone(memory_format=torch.contiguous_format)
            for name, layers in self.tensors.items()
            for layer, t in enumerate(layers)
        }
        flat["tokens"] = self.tokens.contiguous().cpu()
        flat["mask"] = self.mask.contiguous().cpu()
        if self.logits is not None:
            flat["logits"] = self.logits.detach().contiguous().cpu()
        header = {"format": FORMAT, "names": list(self.tensors), "str_tokens": self.str_tokens, "meta": self.meta, "descriptions": NAMES}
        path = Path(path)
        save_file(flat, str(path), metadata={HEADER_KEY: json.dumps(header)})
        return path

    @classmethod
    def load(cls, path: "str | Path") -> "Trace":
        """Read a record written by :meth:`save`.

        Raises:
            ConfigError: the file is not a saved trace (no :data:`HEADER_KEY` header) or of another format.
        """
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            raw = (handle.metadata() or {}).get(HEADER_KEY)
            if raw is None:
                raise ConfigError(f"'{path}' is a safetensors file but not a saved trace (no '{HEADER_KEY}' header). Save traces with Trace.save.")
            header = json.loads(raw)
            if header.get("format") != FORMAT:
                raise ConfigError(f"'{path}' is a trace of format {header.get('format')}; this attnsim reads format {FORMAT}. Capture it again.")
            keys = set(handle.keys())
            n_layers = int(header["meta"].get("n_layers", 0))
            tensors = {name: [handle.get_tensor(f"{name}.{layer}") for layer in range(n_layers)] for name in header["names"]}
            logits = handle.get_tensor("logits") if "logits" in keys else None
            return cls(tensors, handle.get_tensor("tokens"), header["str_tokens"], handle.get_tensor("mask"), logits, header["meta"])

    def log_artifact(self, run_id: str, name: str = "trace.safetensors", uri: Optional[str] = None) -> str:
        """Save the record and log the file as an artifact of an MLflow run (under ``traces/``); returns its artifact path.

        The same as ``mlflow.log_artifact(t.save("trace.safetensors"), "traces")`` inside an active run.

        Args:
            run_id: the MLflow run to log to (it need not be active).
            name: the file's name.
            uri: the tracking store (default: MLflow's current tracking URI).
        """
        import tempfile

        from mlflow import MlflowClient

        with tempfile.TemporaryDirectory() as folder:
            path = self.save(Path(folder) / name)
            MlflowClient(uri).log_artifact(run_id, str(path), "traces")
        return f"traces/{name}"

    def __repr__(self) -> str:
        batch, pos = tuple(self.tokens.shape)
        return f"Trace({self.meta.get('model', '?')}: {batch} text(s) x {pos} tokens, {self.n_layers} layers, names={list(self.tensors)})"


__all__ = ["FORMAT", "HEADER_KEY", "NAMES", "Trace", "check_names"]
