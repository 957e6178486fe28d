"""One loaded model and the analysis of one text: what the live page and the notebook view draw.

:class:`Explorer` loads a model once (any ``model.path`` attnsim supports) and, per text, runs one
forward pass through attnsim's capture (:func:`attnsim.capture.hooks.forward_with_capture`), then:

- the chosen head's attention probabilities and CSM (``Z Zᵀ``, diagonal 0, :func:`attnsim.stats.context_similarity`),
  full resolution, float32;
- the attention rollout after the chosen head's layer (:func:`attnsim.stats.rollout.attention_rollout`);
- every head's attention as a thumbnail: average-pooled to at most :data:`THUMB_CELLS` cells per axis
  (:func:`attnsim.plots.common.pool_matrix`) and quantised to one byte, scaled by the head's own maximum;
- every head's numbers for this one window, from the same ``stats/`` code the corpus runs use
  (:func:`numbers`);
- for a causal LM, the five most likely next tokens at every position; for a classifier, its class
  probabilities;
- with heads switched off (zero or mean ablation through :func:`attnsim.capture.interventions.replace_heads`,
  the interventions' own hook), a second pass and the same quantities beside the clean ones.

Model access is serialised by a lock: two callers (two browser tabs) each get the answer for their own text. A caller
may pass ``stop`` to :meth:`Explorer.analyse`: a request no longer wanted (superseded, its client gone) is dropped
once the model is free, before its forward pass.
"""

from __future__ import annotations

import base64
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from attnsim.errors import AttnsimError

THUMB_CELLS = 24  # thumbnails: at most this many pooled cells per axis
TOP_K = 5  # next tokens shown per position
LOCAL_WIDTH = 4  # "share of mass within 4 tokens"
EXPERIMENT = "attention_maps"  # the experiment whose config (model, corpus, stats, interventions) the explorer reads
DEFAULT_TOKENS = 256  # the most tokens of one text (specials included) unless corpus.seq_len is given, at most the model's
MEAN_WINDOWS = 32  # corpus windows whose per-position mean Z mean ablation uses (at most corpus.limit)
CHARS_PER_TOKEN = 64  # a text is cut to max_tokens x this many characters before it is tokenised (English: 4-5 a token)

Head = Tuple[int, int]


class ExploreError(AttnsimError):
    """A request the explorer cannot answer (empty text, a head out of range, a bad mode); the message says the fix."""


class Stopped(AttnsimError):
    """A request dropped before its forward pass: a newer one from the same page replaced it, or its client went away."""


def encode(array: np.ndarray, dtype: str) -> str:
    """Base64 of an array's bytes in ``dtype`` (little-endian, C order), as the front end decodes it."""
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def finite(value: float) -> Optional[float]:
    """A float for JSON: None for NaN or infinity."""
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass
class Window:
    """One text as the model reads it.

    Attributes:
        batch: a batch of one window (:func:`attnsim.data.module.collate_windows`), no padding.
        labels: T readable token labels.
        tokens: tokens of the text's first ``chars_read`` characters (specials excluded), before any cut.
        kept: text tokens kept (the rest were cut: the model or ``corpus.seq_len`` takes no more).
        chars: the text's length in characters.
        chars_read: characters tokenised (at most :attr:`Explorer.max_chars`; the rest were never read).
    """

    batch: Dict[str, Any]
    labels: List[str]
    tokens: int
    kept: int
    chars: int = 0
    chars_read: int = 0

    @property
    def cut(self) -> int:
        """Text tokens left out at the end, among those tokenised (more when :attr:`chars_cut` > 0)."""
        return self.tokens - self.kept

    @property
    def chars_cut(self) -> int:
        """Characters at the end of the text never tokenised (the character budget)."""
        return self.chars - self.chars_read


@dataclass
class Pass:
    """What one forward pass captured (clean or with heads switched off), and what was computed from it once.

    Attributes:
        z: L tensors (1, H, T, d_head), per-head outputs before W_O.
        attention: L tensors (1, H, T, T) attention probabilities.
        logits: (T, V) for a causal LM, (C,) for a classifier, None otherwise.
        seconds: the forward pass's wall time.
        cache: quantities of the whole pass computed on first use (stacked maps, rollout, numbers, thumbnails).
    """

    z: Tuple[torch.Tensor, ...]
    attention: Tuple[torch.Tensor, ...]
    logits: Optional[torch.Tensor] = None
    seconds: float = 0.0
    cache: Dict[str, Any] = field(default_factory=dict)

    def stacked(self) -> torch.Tensor:
        """(layer, 1, head, T, T) float32 attention, stacked once."""
        if "stacked" not in self.cache:
            self.cache["stacked"] = torch.stack(self.attention).float()
        return self.cache["stacked"]

    def rollout(self, valid: torch.Tensor) -> torch.Tensor:
        """(layer, T, T) attention rollout after each layer (:func:`attnsim.stats.rollout.attention_rollout`), computed once."""
        if "rollout" not in self.cache:
            from attnsim.stats.rollout import attention_rollout

            self.cache["rollout"] = attention_rollout(self.stacked(), valid)[:, 0]
        return self.cache["rollout"]


def _head_pairs(off: Any) -> List[Tuple[int, int]]:
    """``off`` as sorted distinct (layer, head) pairs of integers.

    Raises:
        ExploreError: ``off`` is not a list of [layer, head] pairs of whole numbers (e.g. ``"1,2"``, ``[(1,)]``).
    """
    try:
        if isinstance(off, (str, bytes)):
            raise TypeError
        pairs = set()
        for pair in off:
            if isinstance(pair, (str, bytes)) or len(pair) != 2 or any(isinstance(v, bool) or int(v) != v for v in pair):
                raise TypeError
            pairs.add((int(pair[0]), int(pair[1])))
    except (TypeError, ValueError):
        raise ExploreError(f"The heads switched off are a list of [layer, head] pairs of whole numbers, e.g. [[0, 3], [2, 1]]; got {off!r}.") from None
    return sorted(pairs)


@dataclass
class Explorer:
    """A loaded model, ready to analyse texts (:meth:`analyse`). Build it with :meth:`load`.

    Attributes:
        cfg: the resolved config (experiment ``attention_maps`` with the overrides).
        info: :class:`~attnsim.capture.load.ModelInfo`.
        model: the model in eval mode, eager attention, with its head when the checkpoint has one.
        kind: ``causal_lm``, ``classifier``, ``masked_lm`` or ``encoder`` (:func:`~attnsim.capture.interventions.head_kind`).
        tokenizer: its fast tokenizer.
        max_tokens: the most tokens one window holds, specials included (``corpus.seq_len``, at most the model's).

    A text is cut to :attr:`max_chars` characters before it is tokenised, so that a long paste costs no more than
    the window the page shows.
    """

    cfg: Any
    info: Any
    model: Any
    kind: str
    tokenizer: Any
    max_tokens: int
    load_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _mean_z: Optional[torch.Tensor] = field(default=None, repr=False)
    _categories: Optional[Dict[str, List[int]]] = field(default=None, repr=False)
    _clean: Optional[Tuple[Tuple[int, ...], Pass]] = field(default=None, repr=False)

    @classmethod
    def load(cls, overrides: Sequence[str] = (), threads: Optional[int] = None) -> "Explorer":
        """Read the config (experiment ``attention_maps`` plus ``overrides``, e.g. ``model.path=smollm2``) and load the model once.

        A text is cut after ``corpus.seq_len`` tokens when that override is given, else after :data:`DEFAULT_TOKENS`,
        and never after more than the model's positions.

        Raises:
            ConfigError: a bad override.
            ModelError: the model cannot be found, loaded or captured.
        """
        from attnsim.capture.interventions import load_task_model
        from attnsim.capture.load import inspect_model, load_tokenizer
        from attnsim.config import load_config
        from attnsim.findings.registry import FINDINGS

        started = time.perf_counter()
        cfg = load_config(EXPERIMENT, list(overrides), known_findings=FINDINGS)
        if threads:
            torch.set_num_threads(int(threads))
        given = any(str(o).startswith("corpus.seq_len=") for o in overrides)
        info = inspect_model(cfg.model.path, int(cfg.corpus.seq_len) if given else 8, dict(cfg.model.build or {}))
        if info.arch.vision or info.arch.seq2seq:
            raise ExploreError(
                f"attnsim explore reads text with an encoder or a decoder; '{info.name}' is {'a vision' if info.arch.vision else 'an encoder-decoder'} model. Give a text model (model.path=bundled or smollm2)."
            )
        max_tokens = int(cfg.corpus.seq_len) if given else min(DEFAULT_TOKENS, info.max_length or DEFAULT_TOKENS)
        tokenizer = load_tokenizer(info, max_tokens)
        # eager attention: the probabilities are drawn; Z is captured before W_O either way
        model, kind, _ = load_task_model(info, str(cfg.model.init), int(cfg.seed), "eager", str(cfg.model.dtype))
        return cls(cfg, info, model, kind, tokenizer, max_tokens, time.perf_counter() - started)

    @property
    def max_chars(self) -> int:
        """Characters of a text that are tokenised: :attr:`max_tokens` x :data:`CHARS_PER_TOKEN` (the rest is never read)."""
        return self.max_tokens * CHARS_PER_TOKEN

    # -- one text -------------------------------------------------------------------------------
    def window(self, text: str) -> Window:
        """The text as one window of at most :attr:`max_tokens` tokens (the tokenizer's specials around it).

        Only the text's first :attr:`max_chars` characters are tokenised (the cost of a long paste is bounded);
        :attr:`Window.chars_cut` says how many were left unread.

        Raises:
            ExploreError: the text is empty or only whitespace.
        """
        from attnsim.data.module import collate_windows
        from attnsim.data.sources import Document
        from attnsim.data.windows import document_windows, special_template, token_labels

        if not isinstance(text, str):
            raise ExploreError(f"The text must be a string, got {type(text).__name__}: type a sentence or two to see the heads.")
        if not text.strip():
            raise ExploreError("The text is empty: type a sentence or two to see the heads.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate (\ud800) no tokenizer reads
            raise ExploreError(
                f"The text holds a character that is not Unicode text (U+{ord(exc.object[exc.start]):04X} at character {exc.start}, "
                "half of a surrogate pair); remove it or paste the text again."
            ) from exc
        chars = len(text)
        text = text[: self.max_chars]  # before tokenising: a 50 MB paste costs what the window shows
        prefix, suffix = special_template(self.tokenizer)
        ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if not ids:
            raise ExploreError("The text holds no token this tokenizer reads; type words.")
        room = self.max_tokens - len(prefix) - len(suffix)
        kept = min(len(ids), room)
        seq_len = len(prefix) + kept + len(suffix)
        windows = document_windows(Document("live", text), self.tokenizer, seq_len, False, 1, str(self.cfg.corpus.language), {}, keep_text=1)
        batch = collate_windows([(0, windows[0])], unk_token_id=self.tokenizer.unk_token_id)
        w = windows[0]
        labels = token_labels(self.tokenizer, w.input_ids, w.offsets, w.special_mask, w.text)
        return Window(batch, labels, len(ids), kept, chars, len(text))

    def forward(self, window: Window, off: Sequence[Head] = (), mode: str = "zero") -> Pass:
        """One forward pass with capture (and the heads of ``off`` switched off); call under :attr:`lock`.

        Raises:
            ExploreError: a head out of range, or an unknown mode.
        """
        from attnsim.capture.hooks import forward_with_capture
        from attnsim.capture.interventions import ablation_values, replace_heads

        started = time.perf_counter()
        inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
        values = ablation_values(list(off), mode, self.mean_z(window.batch["input_ids"].shape[1]) if off and mode == "mean" else None) if off else {}
        with torch.inference_mode(), replace_heads(self.model, self.info.arch, self.info.n_heads, values):
            outputs, capture = forward_with_capture(self.model, self.info.arch, self.info.n_heads, inputs, attention=True)
        logits = getattr(outputs, "logits", None)
        if logits is not None:
            logits = logits[0].float()  # (T, V) or (C,)
        if self.kind not in ("causal_lm", "classifier"):
            logits = None
        return Pass(capture.z_layers, capture.attention_layers, logits, time.perf_counter() - started)

    def mean_z(self, seq_len: int) -> torch.Tensor:
        """(layer, head, seq_len, d_head) per-position mean Z over the first :data:`MEAN_WINDOWS` windows of the configured
        corpus (at most ``corpus.limit``), summed by the interventions' own module (phase ``mean``); computed once.

        Raises:
            CorpusError: the corpus cannot be read.
        """
        if self._mean_z is None:
            from attnsim.capture.interventions import InterventionModule
            from attnsim.data.module import collate_windows
            from attnsim.data.sources import read_documents
            from attnsim.data.windows import build_corpus

            c = self.cfg.corpus
            limit = min(MEAN_WINDOWS, int(c.limit or MEAN_WINDOWS))
            documents = read_documents(str(c.source), c.path, c.text_field, list(c.categories), c.encoding)
            corpus = build_corpus(
                documents, self.tokenizer, self.max_tokens, limit, False, int(c.min_tokens), bool(c.shuffle), int(self.cfg.seed), str(c.language)
            )

            class _Inputs:
                needs_z = False

                def inputs(self, batch):  # noqa: ANN001, D102
                    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

            module = InterventionModule(self.model, self.info, [], "mean", _Inputs())
            items = list(enumerate(corpus.windows))
            with torch.inference_mode():
                for start in range(0, len(items), 8):
                    module.predict_step(collate_windows(items[start : start + 8]), start // 8)
            self._mean_z = module.finish_mean()
        return self._mean_z[:, :, :seq_len]

    def check_head(self, layer: int, head: int) -> None:
        """Raises :class:`ExploreError` naming the model's shape when (layer, head) does not exist."""
        n_layers, n_heads = self.info.n_layers, self.info.n_heads
        if not (isinstance(layer, int) and isinstance(head, int) and 0 <= layer < n_layers and 0 <= head < n_heads):
            raise ExploreError(
                f"Head (layer {layer}, head {head}) does not exist: {self.info.name} has {n_layers} layers of {n_heads} heads, numbered from 0. Pick layer 0..{n_layers - 1} and head 0..{n_heads - 1}."
            )

    def analyse(
        self,
        text: str,
        layer: int = 0,
        head: int = 0,
        off: Sequence[Head] = (),
        mode: Optional[str] = None,
        every_head: bool = False,
        stop: Optional[Callable[[], Optional[str]]] = None,
    ) -> Dict[str, Any]:
        """Everything the page draws for ``text`` and head (``layer``, ``head``), as JSON-ready values.

        Args:
            text: the text; its first :attr:`max_chars` characters are tokenised, and it is cut after :attr:`max_tokens`
                tokens (``cut_at`` says at which text token, ``cut`` how many tokenised ones were left out, ``chars_cut``
                how many characters were never tokenised).
            layer, head: the chosen head (0-indexed).
            off: heads switched off, (layer, head) pairs.
            mode: ``zero`` or ``mean`` ablation (default ``interventions.mode``; ``resample`` needs a second window).
            every_head: also embed every head's attention and CSM, quantised (the notebook view, which has no server).
            stop: asked, once the model is free and before each forward pass, whether this request is still wanted;
                it returns why not (a newer request from the same page, a client gone) or None.

        Returns:
            A dict: ``tokens`` (T labels), ``text_tokens``, ``cut``, ``cut_at`` (text tokens read when the text was cut,
            else None), ``chars``, ``chars_cut``, ``layer``, ``head``, ``thumbs`` (base64 uint8 (L, H, c, c) and per-head
            maxima), ``maps`` (base64 float32 T x T ``attention``, ``csm``, ``rollout``), ``numbers`` (every head's
            statistics, name -> L x H), ``predictions`` or ``classes``, ``ablation`` (with ``off``), ``timing`` (ms).

        Raises:
            ExploreError: an empty text, a head out of range, a bad mode.
            Stopped: ``stop`` said why, before a forward pass (nothing was computed after it).
        """
        started = time.perf_counter()
        self.check_head(layer, head)
        mode = str(mode or self.cfg.interventions.mode)
        if mode not in ("zero", "mean"):
            raise ExploreError(f"Ablation mode '{mode}' is not available live; use zero or mean (resample takes Z from another window of a corpus).")
        off = _head_pairs(off)
        for a, b in off:
            self.check_head(a, b)
        window = self.window(text)
        key = tuple(window.batch["input_ids"][0].tolist())

        def check() -> None:
            reason = stop() if stop is not None else None
            if reason:
                raise Stopped(reason)

        with self.lock:
            check()  # waited for the model: is this request still wanted?
            if self._clean is not None and self._clean[0] == key:  # the same text: a new head or ablation only
                clean = self._clean[1]
                forward_ms = 0.0
            else:
                clean = self.forward(window)
                self._clean = (key, clean)
                forward_ms = clean.seconds * 1e3
            if off:
                check()
            ablated = self.forward(window, off, mode) if off else None
            # under the lock too: the pass's cache (numbers, thumbnails, rollout) is filled once, by one caller
            out = self._payload(window, clean, layer, head)
            out["timing"] = {"forward_ms": forward_ms}
            if ablated is not None:
                out["ablation"] = self._ablation(window, clean, ablated, layer, head, off, mode)
                out["timing"]["ablated_ms"] = ablated.seconds * 1e3
            if every_head:
                out["all_maps"] = self._all_maps(window, clean)
        out["timing"]["server_ms"] = (time.perf_counter() - started) * 1e3
        return out

    # -- what is sent -----------------------------------------------------------------------------
    def describe(self) -> Dict[str, Any]:
        """The model's name, shape and kind, for the page's header."""
        return {
            "model": self.info.name,
            "model_type": self.info.model_type,
            "layers": self.info.n_layers,
            "heads": self.info.n_heads,
            "kind": self.kind,
            "causal": bool(self.info.causal),
            "max_tokens": self.max_tokens,
            "max_chars": self.max_chars,
            "mode": str(self.cfg.interventions.mode) if str(self.cfg.interventions.mode) in ("zero", "mean") else "zero",
            "normalise": str(self.cfg.stats.normalise),
            "classes": self._class_names(),
        }

    def _class_names(self) -> Optional[List[str]]:
        if self.kind != "classifier":
            return None
        labels = getattr(self.info.config, "id2label", None) or {}
        return [str(labels.get(i, labels.get(str(i), i))) for i in range(len(labels))]

    def head_maps(self, window: Window, run: Pass, layer: int, head: int) -> Dict[str, torch.Tensor]:
        """The chosen head's (T, T) ``attention``, ``csm`` and the ``rollout`` after its layer, float32."""
        from attnsim.stats import context_similarity

        return {
            "attention": run.attention[layer][0, head].float(),
            "csm": context_similarity(run.z[layer][0, head].float(), str(self.cfg.stats.normalise)),
            "rollout": run.rollout(window.batch["attention_mask"].bool())[layer],
        }

    def _payload(self, window: Window, run: Pass, layer: int, head: int) -> Dict[str, Any]:
        from attnsim.plots.common import pool_matrix

        maps = self.head_maps(window, run, layer, head)
        if "thumbs" not in run.cache:
            pooled, block = pool_matrix(run.stacked()[:, 0].numpy(), THUMB_CELLS)  # (L, H, c, c)
            peak = np.nanmax(pooled, axis=(-2, -1))  # (L, H)
            codes = np.rint(np.nan_to_num(pooled / np.where(peak > 0, peak, 1)[..., None, None]) * 255).astype(np.uint8)
            run.cache["thumbs"] = {
                "cells": int(pooled.shape[-1]),
                "block": int(block),
                "codes": encode(codes, "uint8"),
                "peak": [[finite(v) for v in row] for row in peak],
            }
            run.cache["numbers"] = self.numbers(window, run)
        out: Dict[str, Any] = {
            "tokens": window.labels,
            "n_tokens": len(window.labels),
            "text_tokens": window.tokens,
            "cut": window.cut,
            "cut_at": window.kept if window.cut or window.chars_cut else None,
            "chars": window.chars,
            "chars_cut": window.chars_cut,
            "max_tokens": self.max_tokens,
            "layer": layer,
            "head": head,
            "thumbs": run.cache["thumbs"],
            "maps": {name: encode(value.numpy(), "<f4") for name, value in maps.items()},
            "ranges": {name: [finite(value.min()), finite(value.max())] for name, value in maps.items()},
            "numbers": run.cache["numbers"],
        }
        out.update(self._outputs(run))
        return out

    def _outputs(self, run: Pass, other: Optional[Pass] = None) -> Dict[str, Any]:
        """Top next tokens per position (causal LM) or class probabilities (classifier); with ``other``, its probabilities of them too."""
        if run.logits is None:
            return {}
        probs = torch.softmax(run.logits, -1)
        beside = torch.softmax(other.logits, -1) if other is not None else None
        if self.kind == "classifier":
            out = {"classes": {"p": probs.tolist()}}
            if beside is not None:
                out["classes"]["clean"] = beside.tolist()
            return out
        top = probs.topk(TOP_K, -1)  # (T, 5)
        ids = top.indices
        words = [self._token(int(i)) for i in ids.flatten().tolist()]
        result = {"p": top.values.tolist(), "ids": ids.tolist(), "tokens": [words[r * TOP_K : (r + 1) * TOP_K] for r in range(ids.shape[0])]}
        if beside is not None:
            result["clean"] = beside.gather(-1, ids).tolist()
        return {"predictions": result}

    def _token(self, token_id: int) -> str:
        from attnsim.data.windows import readable_tokens

        return readable_tokens(self.tokenizer, [token_id])[0]

    def _ablation(self, window: Window, clean: Pass, ablated: Pass, layer: int, head: int, off: List[Head], mode: str) -> Dict[str, Any]:
        """The switched-off pass beside the clean one: outputs, the chosen head's maps, every head's change of attention."""
        out: Dict[str, Any] = {"off": [list(h) for h in off], "mode": mode}
        out.update(self._outputs(ablated, clean))
        maps = self.head_maps(window, ablated, layer, head)
        out["maps"] = {name: encode(value.numpy(), "<f4") for name, value in maps.items()}
        out["ranges"] = {name: [finite(value.min()), finite(value.max())] for name, value in maps.items()}
        # every head's change: half the L1 distance between its clean and ablated rows (total variation), mean over rows
        change = (clean.stacked() - ablated.stacked())[:, 0].abs().sum(-1).mean(-1) / 2  # (L, H)
        out["attention_change"] = change.tolist()
        return out

    def numbers(self, window: Window, run: Pass) -> Dict[str, Any]:
        """Every head's statistics for this one window, each (layer, head), from the corpus runs' own ``stats/`` code.

        - ``attention_entropy`` (nats) and ``attention_cls`` (first-token mass) from
          :class:`~attnsim.stats.separators.SeparatorAccumulator`;
        - ``local_mass`` (share within :data:`LOCAL_WIDTH` tokens) and its chance from
          :func:`~attnsim.stats.attention_maps.local_mass`;
        - ``prev_token_score`` and ``induction_score`` (NaN, sent as null, where no token repeats) with their
          chance levels from :class:`~attnsim.stats.induction.InductionAccumulator`.
        """
        from attnsim.findings.separators import separator_ids
        from attnsim.stats.attention_maps import local_mass
        from attnsim.stats.induction import EarlierCSMSums, InductionAccumulator, InductionAttentionSums
        from attnsim.stats.pairs import PairView
        from attnsim.stats.separators import SeparatorAccumulator, SeparatorSums

        s = self.cfg.stats
        if self._categories is None:
            self._categories = separator_ids(self.tokenizer)
        view = PairView(
            run.z,
            window.batch,
            run.attention,
            top_fraction=float(s.top_fraction),
            high_rule=str(s.high_rule),
            zscore=float(s.zscore),
            include_special=bool(s.include_special),
            normalise=str(s.normalise),
            reducers=(SeparatorSums, InductionAttentionSums, EarlierCSMSums),
        )
        n_layers, n_heads = self.info.n_layers, self.info.n_heads
        separators = SeparatorAccumulator(n_layers, n_heads, self._categories, causal=bool(self.info.causal))
        separators.update(view)
        induction = InductionAccumulator(n_layers, n_heads)
        induction.update(view)
        found = {**separators.compute(), **induction.compute()}
        valid = window.batch["attention_mask"].bool()
        found.update(local_mass(run.stacked(), valid, LOCAL_WIDTH, causal=bool(self.info.causal)))
        names = (
            "attention_entropy",
            "attention_entropy_chance",
            "attention_cls",
            "local_mass",
            "local_mass_chance",
            "prev_token_score",
            "prev_token_score_chance",
            "induction_score",
            "induction_score_chance",
        )
        return {name: [[finite(v) for v in row] for row in found[name].double().tolist()] for name in names}

    def _all_maps(self, window: Window, run: Pass) -> Dict[str, Any]:
        """Every head's attention and CSM and every layer's rollout, one byte a cell scaled within each map (notebook view)."""
        from attnsim.stats import context_similarity

        attention = run.stacked()[:, 0]  # (L, H, T, T)
        csm = torch.stack([context_similarity(z[0].float(), str(self.cfg.stats.normalise)) for z in run.z])  # (L, H, T, T)
        rollout = run.rollout(window.batch["attention_mask"].bool())  # (L, T, T)
        out = {}
        for name, value in (("attention", attention), ("csm", csm), ("rollout", rollout)):
            low = value.amin((-2, -1), keepdim=True)
            high = value.amax((-2, -1), keepdim=True)
            span = torch.where(high > low, high - low, torch.ones_like(high))
            codes = torch.round((value - low) / span * 255).clamp(0, 255).to(torch.uint8).numpy()
            out[name] = {"codes": encode(codes, "uint8"), "low": low.flatten().tolist(), "high": high.flatten().tolist()}
        return out


__all__ = ["Explorer", "ExploreError", "Stopped", "Window", "Pass", "THUMB_CELLS", "TOP_K", "LOCAL_WIDTH"]
