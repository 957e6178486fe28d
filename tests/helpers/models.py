"""Tiny seeded encoders and ViTs built from configs here (nothing from a hub), and the bundled MiniLM's folder."""

from __future__ import annotations

from pathlib import Path

import torch

from attnsim.capture.load import resolve_model_path

BUNDLED = resolve_model_path("bundled")


def save_tiny_model(path: Path, kind: str = "bert", layers: int = 2, heads: int = 4, hidden: int = 32, seed: int = 0) -> Path:
    """A randomly initialised encoder of ``kind`` with the bundled MiniLM tokenizer, saved to ``path``."""
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertModel,
        DistilBertConfig,
        DistilBertModel,
        RobertaConfig,
        RobertaModel,
    )

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    vocab = len(tokenizer)
    torch.manual_seed(seed)
    if kind == "bert":
        model = BertModel(
            BertConfig(
                vocab_size=vocab,
                hidden_size=hidden,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                intermediate_size=2 * hidden,
                max_position_embeddings=256,
            )
        )
    elif kind == "distilbert":
        model = DistilBertModel(
            DistilBertConfig(vocab_size=vocab, dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=2 * hidden, max_position_embeddings=256)
        )
    elif kind == "roberta":
        model = RobertaModel(
            RobertaConfig(
                vocab_size=vocab,
                hidden_size=hidden,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                intermediate_size=2 * hidden,
                max_position_embeddings=258,
                pad_token_id=tokenizer.pad_token_id,
            )
        )
    else:
        raise ValueError(kind)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


TINY_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, attn_implementation="eager")


def save_tiny_vit(path: Path, kind: str = "vit", image_size=32, processor: bool = True, seed: int = 0) -> Path:
    """A randomly initialised tiny ViT-family classifier (patch 8, 2 layers, 4 heads), saved with save_pretrained."""
    from transformers import (
        DeiTConfig,
        DeiTForImageClassificationWithTeacher,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersModel,
        ViTConfig,
        ViTForImageClassification,
        ViTImageProcessor,
    )

    torch.manual_seed(seed)
    if kind == "vit":
        model = ViTForImageClassification(ViTConfig(image_size=image_size, patch_size=8, num_labels=3, **TINY_VIT))
    elif kind == "deit":
        model = DeiTForImageClassificationWithTeacher(DeiTConfig(image_size=image_size, patch_size=8, num_labels=3, **TINY_VIT))
    elif kind == "dinov2_registers":
        model = Dinov2WithRegistersModel(
            Dinov2WithRegistersConfig(
                image_size=image_size, patch_size=8, num_register_tokens=2, mlp_ratio=2, **{k: v for k, v in TINY_VIT.items() if k != "intermediate_size"}
            )
        )
    else:
        raise ValueError(kind)
    model.save_pretrained(path)
    if processor:
        size = image_size if isinstance(image_size, (list, tuple)) else (image_size, image_size)
        ViTImageProcessor(size={"height": size[0], "width": size[1]}).save_pretrained(path)
    return path
