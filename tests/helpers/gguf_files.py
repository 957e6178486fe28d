"""Tiny GGUF files written here with the ``gguf`` package's writer: a whole model, one with tensors left out,
and the shards of a split file as llama.cpp's ``gguf-split`` names and tags them.

The model is a tiny seeded Llama (:func:`tests.helpers.tiny_models.tiny_config`) with a byte-level BPE
tokenizer trained here; its tensors get llama.cpp's names (``blk.0.attn_q.weight``) through the ``gguf``
package's own name map, and its query and key weights llama.cpp's row order, so that transformers' reader
gives back the model's own weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List

import numpy as np
import torch
from gguf import GGUFWriter

LAYERS = 2


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order of a query or key projection (rotary halves interleaved), which transformers undoes."""
    rows = weights.shape[0]
    return weights.reshape(heads, 2, rows // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def tiny_llama(seed: int = 0):
    """``(config, tokenizer, model)``: a tiny seeded Llama causal LM (untied LM head) and its byte-level BPE tokenizer."""
    from transformers import AutoModelForCausalLM

    from tests.helpers.tiny_models import tiny_config, train_tokenizer

    tokenizer = train_tokenizer("qwen2")  # byte-level BPE: GGUF's `gpt2` tokenizer model
    config = tiny_config("llama", len(tokenizer), layers=LAYERS, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return config, tokenizer, AutoModelForCausalLM.from_config(config)


def tiny_llama_tensors(seed: int = 0):
    """``(config, tokenizer, {gguf tensor name: float32 array})`` of :func:`tiny_llama`, as llama.cpp names and orders them."""
    import gguf

    config, tokenizer, model = tiny_llama(seed)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, LAYERS)
    tensors: Dict[str, np.ndarray] = {}
    for key, value in model.state_dict().items():
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        array = value.detach().numpy().astype(np.float32)
        if name.endswith("attn_q.weight"):
            array = _permute(array, config.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            array = _permute(array, config.num_key_value_heads)
        tensors[name] = array
    return config, tokenizer, tensors


def _write(path: Path, config, tokenizer, tensors: Dict[str, np.ndarray], split_max_tensors: int = 0) -> GGUFWriter:
    """Write a tiny Llama's metadata and ``tensors``; the writer splits them into shards of ``split_max_tensors``."""
    writer = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_theta if hasattr(config, "rope_theta") else 10000.0)
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    import json

    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(vocab["<s>"])
    writer.add_eos_token_id(vocab["</s>"])
    writer.add_pad_token_id(vocab["<pad>"])
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer


def write_tiny_gguf(path: Path, drop: Iterable[str] = (), seed: int = 0) -> Path:
    """A whole tiny Llama GGUF file at ``path``, without the tensors named in ``drop`` (llama.cpp's names)."""
    config, tokenizer, tensors = tiny_llama_tensors(seed)
    dropped = set(drop)
    _write(Path(path), config, tokenizer, {k: v for k, v in tensors.items() if k not in dropped})
    return Path(path)


def write_split_gguf(folder: Path, stem: str = "tiny", count: int = 2) -> List[Path]:
    """The shards ``STEM-00001-of-0000N.gguf`` ... of a tiny Llama, split by the ``gguf`` package's writer as llama.cpp's
    ``gguf-split`` splits: the tensors divided between the shards, each with ``split.no``, ``split.count`` and
    ``split.tensors.count``, the model's metadata in the first."""
    config, tokenizer, tensors = tiny_llama_tensors()
    Path(folder).mkdir(parents=True, exist_ok=True)
    writer = _write(Path(folder) / f"{stem}.gguf", config, tokenizer, tensors, split_max_tensors=-(-len(tensors) // count))
    return writer.format_shard_names(Path(folder) / f"{stem}.gguf")
