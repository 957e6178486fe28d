"""Tiny seeded models of every supported family, with tokenizers trained here on a few BBC documents.

Nothing comes from a hub: each tokenizer is trained with the ``tokenizers`` library on the first
BBC documents, wrapped as a ``PreTrainedTokenizerFast`` (so its character offsets are the
tokenizer's own), and saved with ``save_pretrained`` next to a randomly initialised model
(``torch.manual_seed(seed)``) of the family's Hugging Face config.

- byte-level BPE (GPT-2's ``Ġ`` and byte symbols): ``gpt2``, ``gpt_neox``, ``qwen2``, ``opt``, ``bart``;
- SentencePiece-style metaspace BPE (``▁``): ``llama``, ``mistral``, ``gemma``, ``gemma3_text``, ``t5``, ``marian``.

Usage: ``save_tiny(tmp_path, "gpt2")`` returns the directory, to pass as ``model.path``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import List

import torch

DECODERS = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", "gemma", "gemma3_text", "opt")
SEQ2SEQ = ("t5", "bart", "marian")
BYTE_LEVEL = ("gpt2", "gpt_neox", "qwen2", "opt", "bart")


@lru_cache(maxsize=1)
def training_texts(n_documents: int = 40) -> List[str]:
    """The first ``n_documents`` BBC documents (sorted by id), the tokenizers' training text."""
    from attnsim.data.sources import bbc_documents

    docs = sorted(bbc_documents(), key=lambda d: d.doc_id)[:n_documents]
    return [d.text for d in docs]


def train_tokenizer(family: str, vocab_size: int = 400):
    """A fast tokenizer of ``family``'s kind trained on :func:`training_texts`.

    Byte-level families get a GPT-2 style byte-level BPE; the others a metaspace (``▁``) BPE with
    byte fallback, as Llama's and T5's SentencePiece models behave. Special tokens: ``<s>``, ``</s>``,
    ``<pad>``, ``<unk>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    if family in BYTE_LEVEL:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=vocab_size + 256, special_tokens=specials + byte_tokens)
    tok.train_from_iterator(training_texts(), trainer=trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    if family in ("gpt2", "gpt_neox", "opt"):  # GPT-2/NeoX add no specials; OPT prepends </s>-style BOS
        if family == "opt":
            tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    elif family in ("llama", "mistral", "gemma", "gemma3_text"):
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    elif family == "bart":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)])
    elif family in ("t5", "marian"):
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos)])
    # qwen2: no specials added
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", model_max_length=512)


def tiny_config(family: str, vocab_size: int, layers: int = 2, heads: int = 4, hidden: int = 32, positions: int = 512, **overrides):
    """The Hugging Face config of a tiny ``family`` model (Llama family: 2 key/value heads, grouped-query attention).

    ``gemma3_text`` (Gemma 3's text model): its first layer attends within a sliding window of 4 tokens, its other
    layers to every earlier token, as Gemma 3's global layers do; scores are scaled by ``query_pre_attn_scalar`` = 16
    (not ``head_dim``), queries and keys are RMS-normed per head (QK-norm).
    """
    from transformers import AutoConfig

    common = dict(vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if family == "gpt2":
        fields = dict(n_embd=hidden, n_layer=layers, n_head=heads, n_positions=positions)
    elif family == "gpt_neox":
        fields = dict(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=2 * hidden,
            max_position_embeddings=positions,
            rotary_pct=0.5,
        )
    elif family in ("llama", "mistral", "qwen2", "gemma"):
        fields = dict(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            intermediate_size=2 * hidden,
            max_position_embeddings=positions,
            head_dim=hidden // heads,
        )
    elif family == "gemma3_text":
        fields = dict(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            intermediate_size=2 * hidden,
            max_position_embeddings=positions,
            head_dim=hidden // heads,
            sliding_window=4,
            layer_types=["sliding_attention"] + ["full_attention"] * (layers - 1),
            query_pre_attn_scalar=16,
        )
    elif family == "opt":
        fields = dict(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            ffn_dim=2 * hidden,
            max_position_embeddings=positions,
            word_embed_proj_dim=hidden,
        )
    elif family == "t5":
        fields = dict(
            d_model=hidden, d_kv=hidden // heads, d_ff=2 * hidden, num_layers=layers, num_decoder_layers=layers, num_heads=heads, decoder_start_token_id=0
        )
    elif family in ("bart", "marian"):
        fields = dict(
            d_model=hidden,
            encoder_layers=layers,
            decoder_layers=layers,
            encoder_attention_heads=heads,
            decoder_attention_heads=heads,
            encoder_ffn_dim=2 * hidden,
            decoder_ffn_dim=2 * hidden,
            max_position_embeddings=positions,
            decoder_start_token_id=0 if family == "marian" else 2,
        )
    else:
        raise ValueError(f"unknown family {family}")
    fields.update(common)
    fields.update(overrides)
    return AutoConfig.for_model(family, **fields)


def save_tiny(path: Path, family: str, seed: int = 0, lm_head: bool = True, **config) -> Path:
    """Save a tiny seeded ``family`` model (with its LM head when ``lm_head``) and its trained tokenizer to ``path``."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    tokenizer = train_tokenizer(family)
    cfg = tiny_config(family, len(tokenizer), **config)
    torch.manual_seed(seed)
    if not lm_head:
        model = AutoModel.from_config(cfg)
    elif family in SEQ2SEQ:
        model = AutoModelForSeq2SeqLM.from_config(cfg)
    else:
        model = AutoModelForCausalLM.from_config(cfg)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
