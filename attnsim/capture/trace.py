"""``attnsim.trace``: one forward pass of a few texts, every layer's internals in TransformerLens's names.

The capture reuses the architecture table (:mod:`attnsim.capture.architectures`) and the per-head hooks
(:func:`attnsim.capture.hooks.capture_heads`); it adds forward hooks on each layer (its input and output),
on W_O (its output) and on the MLP module the family declares (``Architecture.mlp``).

What each name is, per kind of model:

- ``z``: the input of W_O split by head (the same tensor as every run's capture), axes (batch, pos, head, d_head).
- ``result``: ``z[..., h, :] @ W_O[h]`` for each head h (W_O's per-head slice, no bias); summed over heads, plus
  W_O's bias where it has one, it is ``attn_out``.
- ``attn_out``: W_O's output (bias included). ``mlp_out``: the output of the family's MLP module.
- ``resid_pre``: the layer's input; ``resid_post``: its output (``resid_post[L]`` is ``resid_pre[L + 1]``).
- ``resid_mid``: ``resid_pre + attn_out``. In a pre-norm decoder (GPT-2, Llama family, OPT) this is the
  stream the MLP's norm reads, and ``resid_post = resid_mid + mlp_out``. In a parallel block (GPT-NeoX with
  ``use_parallel_residual``, Phi) the MLP reads ``resid_pre`` too, and ``resid_post = resid_mid + mlp_out``
  still holds. In a post-norm encoder (BERT family) ``resid_mid`` is the sum *before* the attention block's
  LayerNorm, ``mlp_out`` the output projection's (``output.dense``) output before the output LayerNorm, and
  ``resid_post`` the layer's output after it: ``resid_post = LayerNorm(LayerNorm(resid_mid) + mlp_out)``.
- Vision Transformers (ViT, DeiT: pre-norm): as pre-norm decoders, over the extra tokens and the patches. DINOv2
  scales each write by a learned layer scale: ``mlp_out`` is the scaled write (``layer_scale2``'s output), but
  ``attn_out`` is W_O's output before ``layer_scale1``, so ``resid_mid`` there is not a point of the stream.
- Encoder–decoders (T5, BART, Marian): the record is the *decoder's*: ``pattern`` its causal self-attention,
  ``attn_out`` its self-attention's output; the cross-attention's write lies between ``resid_mid`` and the
  MLP, so ``resid_post = resid_mid + cross-attention output + mlp_out`` (T5; BART and Marian are post-norm).
  The encoder reads the text and the decoder reads the same text shifted right (teacher forcing).

Sources: the residual-stream view and names of Elhage et al. (2021), "A Mathematical Framework for
Transformer Circuits", and TransformerLens's ``HookedTransformer.run_with_cache``.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from functools import lru_cache
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from attnsim.capture.architectures import Architecture, architecture_for, layer_modules, projection_weight
from attnsim.capture.hooks import capture_heads, check_shapes, no_cache, output_projections
from attnsim.capture.record import Trace, check_names
from attnsim.errors import ConfigError, ModelError

_HOOKED = ("attn_out", "mlp_out", "resid_pre", "resid_post")  # names read by this module's own hooks


def _first_tensor(value: Any) -> torch.Tensor:
    """The hidden states of a module's output or input: the tensor itself, or the first element of a tuple."""
    return value if isinstance(value, torch.Tensor) else value[0]


@contextmanager
def residual_hooks(layers: Sequence[nn.Module], output: str, mlp: str, wanted: Sequence[str]) -> Iterator[Dict[str, List[torch.Tensor]]]:
    """Record each layer's input, output, W_O's output and the MLP's output during the forward passes of the block.

    Args:
        layers: the model's layers, in order.
        output: path (within a layer) of W_O; mlp: path of the MLP module whose output is its write.
        wanted: which of ``attn_out``, ``mlp_out``, ``resid_pre``, ``resid_post`` to record.

    Yields:
        name -> list receiving one (batch, pos, d_model) tensor per layer, in order.

    Raises:
        ModelError: ``mlp_out`` is wanted but the family declares no MLP module.
    """
    store: Dict[str, List[torch.Tensor]] = {name: [] for name in wanted}
    handles = []

    def keep(name: str, pre: bool = False):
        if pre:
            return lambda _m, args, kwargs: store[name].append(_first_tensor(args if args else (kwargs["hidden_states"],)).detach())
        return lambda _m, _args, out: store[name].append(_first_tensor(out).detach())

    if "mlp_out" in wanted and not mlp:
        raise ModelError("This model family declares no MLP module (Architecture.mlp), so attnsim.trace cannot capture mlp_out; leave it out of names=.")
    try:
        for layer in layers:
            if "resid_pre" in wanted:
                handles.append(layer.register_forward_pre_hook(keep("resid_pre", pre=True), with_kwargs=True))
            if "resid_post" in wanted:
                handles.append(layer.register_forward_hook(keep("resid_post")))
            if "attn_out" in wanted:
                handles.append(layer.get_submodule(output).register_forward_hook(keep("attn_out")))
            if "mlp_out" in wanted:
                handles.append(layer.get_submodule(mlp).register_forward_hook(keep("mlp_out")))
        yield store
    finally:
        for handle in handles:
            handle.remove()


def _needed(names: Sequence[str]) -> Tuple[set, bool, bool]:
    """What to record for ``names``: the hooked names, whether Z is needed and whether attention probabilities are."""
    hooked = {n for n in names if n in _HOOKED}
    if "resid_mid" in names:
        hooked |= {"resid_pre", "attn_out"}
    return hooked, bool({"z", "result"} & set(names)), "pattern" in names


def _assemble(
    names: Sequence[str], z: List[torch.Tensor], hooked: Dict[str, List[torch.Tensor]], maps: Optional[Sequence[torch.Tensor]], w_o: Optional[torch.Tensor]
) -> Dict[str, List[torch.Tensor]]:
    """The record's per-layer tensors in TransformerLens's axis orders, from the raw captures (only ``names`` kept)."""
    out: Dict[str, List[torch.Tensor]] = {}
    for name in names:
        if name == "pattern":
            out[name] = [m.detach() for m in maps]
        elif name == "z":
            out[name] = [layer.detach().transpose(1, 2) for layer in z]  # (B, H, T, d) -> (B, T, H, d)
        elif name == "result":
            out[name] = [torch.einsum("bhtd,hdm->bthm", layer.detach(), w_o[index]) for index, layer in enumerate(z)]
        elif name == "resid_mid":
            out[name] = [pre + attn for pre, attn in zip(hooked["resid_pre"], hooked["attn_out"])]
        else:
            out[name] = hooked[name]
    return out


def capture_record(
    model: nn.Module, arch: Any, n_heads: int, inputs: Dict[str, torch.Tensor], names: Sequence[str]
) -> Tuple[Dict[str, List[torch.Tensor]], Any]:
    """Run the model once on ``inputs`` and return ``(name -> per-layer tensors, the model's outputs)``.

    Args:
        model: a loaded model (any head: ``AutoModel``, ``...ForCausalLM``, ``...ForSeq2SeqLM``), eval mode; it must run
            eager attention when ``pattern`` is among ``names``.
        arch: its :class:`~attnsim.capture.architectures.Architecture` (a :class:`Seq2SeqArchitecture`: the decoder is
            captured; ``inputs`` then hold ``decoder_input_ids``).
        n_heads: the (query) heads per layer.
        inputs: the forward's keyword arguments.
        names: names of :data:`attnsim.capture.record.NAMES`.

    Raises:
        ModelError: a capture missed a layer, a tensor has the wrong shape, or attention probabilities were asked for and the
            model returned none (load it with eager attention).
    """
    names = check_names(names)
    stream = _decoder_stream(arch) if arch.seq2seq else arch
    mlp = arch.decoder_mlp if arch.seq2seq else arch.mlp
    layers = layer_modules(model, stream)
    hooked_names, need_z, need_maps = _needed(names)
    with ExitStack() as stack:
        z = stack.enter_context(capture_heads(model, stream, n_heads)) if need_z else []
        hooked = stack.enter_context(residual_hooks(layers, stream.output, mlp, sorted(hooked_names)))
        with torch.no_grad():
            outputs = model(**inputs, output_attentions=need_maps, **no_cache(model))
    maps = None
    if need_maps:
        maps = getattr(outputs, "decoder_attentions" if arch.seq2seq else "attentions", None)
        if not maps or len(maps) != len(layers) or any(m is None for m in maps):
            impl = getattr(model.config, "_attn_implementation", "?")
            raise ModelError(f"The model returned no attention probabilities (attention implementation '{impl}'); load it with attn_implementation='eager'.")
    for name, captured in list(hooked.items()) + [("z", z)] * need_z:
        if len(captured) != len(layers):
            raise ModelError(f"Captured {name} of {len(captured)} layers but the model has {len(layers)}; the architecture table does not match this model.")
    if arch.vision:  # T: the extra tokens and the patches, as the captured tensors say
        size, length = int(inputs["pixel_values"].shape[0]), None
    else:
        size, length = (int(s) for s in inputs["decoder_input_ids" if arch.seq2seq else "input_ids"].shape)
    check_shapes(z, maps, n_heads, size, length)
    if "mlp_out" in hooked:  # OPT runs its MLP on the flattened (batch x pos, d_model) stream
        hooked["mlp_out"] = [m.reshape(size, -1, m.shape[-1]) for m in hooked["mlp_out"]]
    w_o = output_projections(model, stream, n_heads) if "result" in names else None
    return _assemble(names, z, hooked, maps, w_o), outputs


def _decoder_stream(arch: Any) -> Architecture:
    """The single-stream view of an encoder–decoder's decoder self-attention (layers and W_O)."""
    from attnsim.capture.seq2seq import _stream

    return _stream(arch, "decoder")


def attention_bias(model: nn.Module, arch: Any, d_model: int) -> torch.Tensor:
    """W_O's bias of every layer: (layer, d_model), zeros where W_O has none (Llama family)."""
    stream = _decoder_stream(arch) if arch.seq2seq else arch
    biases = []
    for layer in layer_modules(model, stream):
        bias = getattr(layer.get_submodule(stream.output), "bias", None)
        biases.append(bias.detach() if bias is not None else projection_weight(layer.get_submodule(stream.output), stream).new_zeros(d_model))
    return torch.stack(biases)


@lru_cache(maxsize=2)
def _loaded(path: str, eager: bool) -> Tuple[Any, nn.Module, Any]:
    """``(info, model, tokenizer)`` of a ``model.path``, with its LM head where it has one (kept for the next call)."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from attnsim.capture.load import inspect_model, load_model, load_tokenizer

    info = inspect_model(path, 1)  # the length is checked by trace (texts are cut to the model's positions)
    auto = AutoModelForCausalLM if info.causal else AutoModelForSeq2SeqLM if info.arch.seq2seq else AutoModel
    model, _ = load_model(info, attn_implementation="eager" if eager else "sdpa", needs_attention=eager, auto_class=auto)
    if info.arch.seq2seq:
        from attnsim.capture.seq2seq import load_pair_tokenizer

        return info, model, load_pair_tokenizer(info, 1)
    return info, model, None if info.arch.vision else load_tokenizer(info, 1)


def _texts(text_or_texts: Any) -> "List[str] | torch.Tensor":
    """The texts of ``attnsim.trace``'s first argument (one string or a list of strings), or its token ids ((batch, pos) or (pos,)).

    Raises:
        ConfigError: not a non-empty string, a non-empty list of them, an integer tensor of token ids or a
            (batch, channels, height, width) float tensor of images.
    """
    if isinstance(text_or_texts, torch.Tensor) and text_or_texts.dim() in (1, 2) and not text_or_texts.is_floating_point() and text_or_texts.numel():
        return text_or_texts if text_or_texts.dim() == 2 else text_or_texts[None]
    if isinstance(text_or_texts, torch.Tensor) and text_or_texts.dim() == 4 and text_or_texts.is_floating_point():
        return text_or_texts  # images: (batch, channels, height, width) pixel values
    texts = [text_or_texts] if isinstance(text_or_texts, str) else text_or_texts
    if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise ConfigError(
            f"attnsim.trace takes a text, a list of texts (each a non-empty string) or a tensor of token ids; got {type(text_or_texts).__name__} {str(text_or_texts)[:60]!r}."
        )
    return list(texts)


def _inputs(tokenizer: Any, texts: "List[str] | torch.Tensor", arch: Any, config: Any, seq_len: int) -> Dict[str, torch.Tensor]:
    """The forward's inputs: token ids and mask (texts padded on the right; token ids as given, every one real); an
    encoder–decoder's decoder reads the same tokens shifted right (:func:`attnsim.capture.seq2seq.shift_right`)."""
    if arch.vision or (isinstance(texts, torch.Tensor) and texts.is_floating_point()):
        from attnsim.capture.vision import vision_inputs

        if not (arch.vision and isinstance(texts, torch.Tensor) and texts.is_floating_point()):
            kind = "a Vision Transformer takes" if arch.vision else "a text model takes texts or token ids, not"
            raise ConfigError(f"attnsim.trace: {kind} images, a (batch, channels, height, width) float tensor of pixel values.")
        return vision_inputs(texts, config, arch)
    if isinstance(texts, torch.Tensor):
        ids = texts.long()[:, :seq_len]
        encoded = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    else:
        if tokenizer.pad_token is None:  # decoders often have none; padding is masked, any id does
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=seq_len, return_tensors="pt")
    inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    if arch.seq2seq:
        from attnsim.capture.seq2seq import _start_token, shift_right

        start, pad = _start_token(config)
        inputs["decoder_input_ids"] = shift_right(encoded["input_ids"], start, pad)
        inputs["decoder_attention_mask"] = encoded["attention_mask"]
    return inputs


def trace(
    text_or_texts: "str | Sequence[str]", model: Any = "bundled", names: Optional[Sequence[str]] = None, tokenizer: Any = None, seq_len: int = 512
) -> Trace:
    """One forward pass of a text (or a batch of texts), every layer's internals kept in TransformerLens's names.

    Example (on the bundled encoder; ``t["result", L].sum(2)`` is ``attn_out`` minus W_O's bias):

        >>> import attnsim
        >>> t = attnsim.trace("The cat sat on the mat. The cat", model="bundled")
        >>> t.str_tokens[0][:4]
        ['[CLS]', 'the', 'cat', 'sat']
        >>> tuple(t["pattern", 3].shape)  # (batch, head, query, key): attention probabilities of layer 3
        (1, 12, 11, 11)
        >>> tuple(t["result", 3].shape)  # (batch, pos, head, d_model)
        (1, 11, 12, 384)
        >>> path = t.save("cat.safetensors")
        >>> attnsim.Trace.load(path)["z", 3].shape == t["z", 3].shape
        True

    Args:
        text_or_texts: a text or a list of texts (padded on the right to the longest; ``t.mask`` marks real tokens), or
            token ids, a (batch, pos) or (pos,) integer tensor (no special tokens are added); for a Vision Transformer,
            images: a (batch, channels, height, width) float tensor of pixel values (``t.tokens`` are then the
            positions: the extra tokens, e.g. [CLS], then the patches row by row).
        model: any ``model.path`` attnsim supports (``bundled``, ``smollm2``, a folder, a ``.gguf`` file; loaded once and
            kept for the next call, with its LM head where the checkpoint has one), or a loaded Hugging Face model
            (then ``tokenizer`` is required).
        names: what to keep (default: all). Memory per layer, float32, for B texts of T tokens, H heads:
            ``pattern`` 4·B·H·T² bytes; ``z`` 4·B·T·H·d_head; ``result`` 4·B·T·H·d_model (H times a residual
            tensor: SmolLM2, one text of 128 tokens, 30 layers: 76 MiB); ``attn_out``, ``mlp_out``, ``resid_pre``, ``resid_mid``,
            ``resid_post`` 4·B·T·d_model each. ``t.logits`` (B, T, vocab) is kept whatever ``names`` says.
        tokenizer: the tokenizer of a loaded ``model`` (not needed for token ids: ``str_tokens`` are then the ids as text).
        seq_len: tokens kept of each text (longer texts are cut; at most the model's positions).

    Returns:
        A :class:`~attnsim.capture.record.Trace`; its module docstring (:mod:`attnsim.capture.trace`) says what each name
        is in encoders, decoders and encoder–decoders.

    Raises:
        ConfigError: an unknown name, no text, or images for a text model (and texts for a Vision Transformer).
        ModelError: a model attnsim cannot load or capture.
    """
    names = check_names(names)
    texts = _texts(text_or_texts)
    info, model, tokenizer, meta, seq_len = _model_of(model, tokenizer, texts, "pattern" in names, seq_len)
    arch = architecture_for(model.config.model_type)
    inputs = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in _inputs(tokenizer, texts, arch, model.config, seq_len).items()}
    tensors, outputs = capture_record(model, arch, meta["n_heads"], inputs, names)
    if arch.vision:  # images: token i is position i (the extra tokens, e.g. [CLS], then the patches row by row)
        length = next(iter(tensors.values()))[0].shape[2 if "pattern" in tensors else 1]
        tokens = torch.arange(length).expand(inputs["pixel_values"].shape[0], length)
        inputs["attention_mask"] = torch.ones_like(tokens)
    else:
        tokens = inputs["input_ids"]
    logits = getattr(outputs, "logits", None)
    str_tokens = [tokenizer.convert_ids_to_tokens(row) if tokenizer is not None and not arch.vision else [str(i) for i in row] for row in tokens.tolist()]
    return Trace(tensors, tokens, str_tokens, inputs["attention_mask"], logits.detach() if logits is not None else None, meta)


def _model_of(model: Any, tokenizer: Any, texts: Any, attention: bool, seq_len: int) -> tuple:
    """``(info, model, tokenizer, meta, seq_len)`` of :func:`trace`'s ``model`` argument: a loaded Hugging Face model as
    given (``info`` None; its tokenizer required for texts), or a ``model.path`` loaded once (:func:`_loaded`), with
    ``seq_len`` cut to its positions. ``meta``: the record's model name, type, kind and shape (the decoder's, for an
    encoder–decoder).

    Raises:
        ConfigError: texts through a loaded model without its tokenizer.
        ModelError: a model attnsim cannot load or capture.
    """
    from attnsim.capture.load import model_shape

    if isinstance(model, nn.Module):
        if tokenizer is None and not isinstance(texts, torch.Tensor):
            raise ConfigError(
                "attnsim.trace of texts through a loaded model needs its tokenizer: trace(texts, model=model, tokenizer=tokenizer); or give token ids."
            )
        info, name = None, str(getattr(model.config, "_name_or_path", "") or model.config.model_type)
    else:
        info, model, tokenizer = _loaded(str(model), attention)
        seq_len, name = min(seq_len, info.max_length or seq_len), info.name
    arch = architecture_for(model.config.model_type)
    n_layers, n_heads, d_head, d_model, _ = model_shape(model.config)
    if arch.seq2seq:
        from attnsim.capture.seq2seq import decoder_shape

        n_layers, n_heads, d_head = decoder_shape(model.config)
    meta = {
        "model": name,
        "model_type": model.config.model_type,
        "kind": str(arch.kind),
        "n_layers": n_layers,
        "n_heads": n_heads,
        "d_head": d_head,
        "d_model": d_model,
    }
    return info, model, tokenizer, meta, seq_len


__all__ = ["attention_bias", "capture_record", "residual_hooks", "trace"]
