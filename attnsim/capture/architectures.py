"""Where each supported architecture keeps its layers and attention projections.

Paths are relative to ``model.base_model`` (so a ``...ForSequenceClassification``
model works like its encoder) and to each layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import torch.nn as nn

from attnsim.errors import ModelError


@dataclass(frozen=True)
class Architecture:
    """Module paths of one encoder family.

    Attributes:
        layers: path of the ``ModuleList`` of layers under ``base_model``.
        query, key, value: paths (within a layer) of the Q, K, V projections, each ``Linear(d_model, H*d_head)``.
        output: path (within a layer) of the attention output projection W_O, ``Linear(H*d_head, d_model)``;
            its input is the concatenation of the heads' outputs Z.
        vision: inputs are images (pixel_values), not token ids.
        interpolation: how a Vision Transformer takes images of another size than ``config.image_size``
            (its position embeddings are resampled to the new patch grid): ``argument`` (the forward
            takes ``interpolate_pos_encoding=True``; ViT, DeiT), ``always`` (the embeddings always
            resample; DINOv2) or ``none`` (images must be ``config.image_size``).
    """

    layers: str
    query: str
    key: str
    value: str
    output: str
    vision: bool = False
    interpolation: str = "none"


_BERT = Architecture("encoder.layer", "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense")
# transformers 5: ViT/DeiT layers sit directly under the base model, with fused-style q/k/v/o projections
_VIT = Architecture("layers", "attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj", vision=True, interpolation="argument")
_DINOV2 = Architecture("encoder.layer", "attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj", vision=True, interpolation="always")

ARCHITECTURES: Dict[str, Architecture] = {
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
    "camembert": _BERT,
    "electra": _BERT,
    "distilbert": Architecture("transformer.layer", "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin"),
    "vit": _VIT,
    "deit": _VIT,
    "dinov2": _DINOV2,
    "dinov2_with_registers": _DINOV2,
}


def architecture_for(model_type: str) -> Architecture:
    """The :class:`Architecture` of a ``config.model_type``.

    Raises:
        ModelError: the architecture is not supported; the message lists the supported ones.
    """
    if model_type not in ARCHITECTURES:
        raise ModelError(
            f"attnsim cannot capture attention heads of model type '{model_type}'. Supported model types: "
            f"{', '.join(sorted(ARCHITECTURES))}. Use a model of one of these families."
        )
    return ARCHITECTURES[model_type]


def layer_modules(model: nn.Module, arch: Architecture) -> nn.ModuleList:
    """The encoder's layers (``base_model.<arch.layers>``)."""
    return model.base_model.get_submodule(arch.layers)

# decoder families (minimal entry for the long-context path; the decoder work adds the full family)
ARCHITECTURES.setdefault("llama", Architecture("layers", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"))
