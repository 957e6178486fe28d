"""Finding callbacks: each folds every predict batch into its accumulators.

A finding declares the statistics it produces and whether it needs attention
probabilities; it gets a :class:`FindingContext` (tokenizer, vocabulary size, image
layout, ...). It never logs: at the end of predict the run workflow asks each
finding for its :class:`~attnsim.results.Summary` (defined in :mod:`attnsim.results`,
re-exported here) and hands it to the tracking module.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type

import pytorch_lightning as pl

from attnsim.results import Summary  # noqa: F401 - re-exported: findings import it from here
from attnsim.stats.base import Accumulator
from attnsim.stats.pairs import ChunkReducer, PairView

log = logging.getLogger(__name__)


@dataclass
class FindingContext:
    """What a finding may need beyond the activations: the same object is given to every finding of a run.

    Attributes:
        tokenizer: the run's tokenizer (Hugging Face), or for images the position tokenizer of
            :func:`attnsim.data.images.prepare_images`; None in tests that need none.
        vocab_size: number of token ids (``len(tokenizer)``): the size of per-token-id counters.
        maps: the config section ``maps`` (rollout and gradient-map settings), None when absent.
        examples: number of example windows drawn in figures (``plots.examples``), 0 for none.
        vision: whether the model is a vision transformer (tokens are image patches).
        layout: for images, the token layout (extra tokens and patch grid,
            :class:`attnsim.data.images.TokenLayout`); None for text.
        model: the inspected model (:class:`attnsim.capture.load.ModelInfo`), None in tests.
    """

    tokenizer: Any = None
    vocab_size: Optional[int] = None
    maps: Any = None
    examples: int = 0
    vision: bool = False
    layout: Any = None
    model: Any = None


class Finding(pl.Callback):
    """Base class. Subclasses declare, as class attributes, what they produce (``name``, ``statistics``,
    ``profiles``), what they need from the run (``needs_attention``, ``needs_gradients``, ``blockwise``,
    ``needs_interventions``, ``encoder_decoder``; gathered by :meth:`Needs.of`) and the config keys they
    read (``config_keys``, logged as the run's params), and implement :meth:`build` (the accumulators).
    The default :meth:`summarise` serves a finding whose accumulators' ``compute()`` hold its statistics."""

    name: str = ""
    description: str = ""
    statistics: tuple = ()
    # outputs of compute() logged as (layer, head, K) profiles (a missing one is skipped), their bins'
    # index (``profile_bins``: an output of compute(), None: positions 0..K-1) and what figures() reads
    profiles: tuple = ()
    profile_bins: Optional[str] = None
    figure_outputs: tuple = ()
    needs_attention: bool = False
    # True: predict runs the gradient capture (a classifier, gradients of the target logit)
    needs_gradients: bool = False
    # True: every statistic also has a blockwise form (stats/pairs/blocks.py, capture.path=blockwise)
    blockwise: bool = False
    # True: an intervention (ablation, patching): its own module and passes, alone in its run
    needs_interventions: bool = False
    # True: measured on an encoder–decoder's sentence pairs (corpus.source=translation, T5/BART/Marian)
    encoder_decoder: bool = False
    # names of the capture record (attnsim.capture.record.NAMES) read from a causal LM's residual-stream run
    # (attnsim.capture.residual: the batch is a ResidualBatch, not a PairView); empty: a plain capture
    residual: Tuple[str, ...] = ()
    # dotted config keys the finding reads beyond those every measurement run reads
    # (attnsim.tracking.params.RUN_KEYS); a section name ("interventions") stands for all its keys.
    # The run logs them as params (attnsim.tracking.params.measure_params).
    config_keys: Tuple[str, ...] = ()
    # time its figures take to draw, relative to a finding with a layer x head mosaic and one more
    # figure (measured: csm 3, separators 2): where several processes draw (plots.processes), the
    # costliest findings start first, so that none is left to draw alone at the end
    figure_cost: float = 1.0

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, stats_cfg: Any, context: Optional[FindingContext] = None):
        """
        Args:
            n_layers, n_heads: the model's layers and heads per layer.
            seq_len: tokens per window (T; for images the extra tokens plus the patches).
            stats_cfg: the config section ``stats``.
            context: what the finding may need beyond activations (:class:`FindingContext`).

        Raises:
            TypeError: ``context`` is not a :class:`FindingContext` (e.g. the old ``extra`` dict).
        """
        super().__init__()
        if context is not None and not isinstance(context, FindingContext):
            raise TypeError(f"{type(self).__name__}(..., context=...) takes a FindingContext (attnsim.findings.base), not {type(context).__name__}.")
        self.n_layers, self.n_heads, self.seq_len = n_layers, n_heads, seq_len
        self.cfg = stats_cfg
        self.context = context if context is not None else FindingContext()
        self.accumulators: Dict[str, Accumulator] = self.build()
        self.windows = 0
        self.error: Optional[BaseException] = None

    def build(self) -> Dict[str, Accumulator]:
        return {}

    def reducers(self) -> List[Type[ChunkReducer]]:
        """The per-chunk reducers this finding's statistics read (each accumulator's ``reducers``), to be
        registered with every batch's view before the first statistic reads it (see :func:`view_factory`)."""
        return [kind for acc in self.accumulators.values() for kind in getattr(acc, "reducers", ())]

    def metric_names(self) -> List[str]:
        """Every model-mean metric name this finding logs (``finding/statistic``)."""
        return [f"{self.name}/{s}" for s in self.statistics]

    # -- Lightning hooks ---------------------------------------------------------
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for acc in self.accumulators.values():
            acc.to(pl_module.device)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:  # noqa: ANN001
        if self.error is not None:
            return
        try:
            self.update(outputs)
        except Exception as exc:  # noqa: BLE001 - keep the other findings running; the run fails at the end
            log.exception("finding %s failed on batch %d; its statistics stop here", self.name, batch_idx)
            self.error = exc

    # -- statistics -------------------------------------------------------------------
    def update(self, view: PairView) -> None:
        for acc in self.accumulators.values():
            acc.update(view)
        self.windows += view.batch_size

    def merge(self, other: "Finding") -> "Finding":
        """Merge another instance's accumulators into this one."""
        for key, acc in self.accumulators.items():
            acc.merge(other.accumulators[key])
        self.windows += other.windows
        return self

    def summarise(self) -> Summary:
        """The corpus-level summary: the declared ``statistics``, ``profiles`` (with the ``profile_bins``
        index) and ``figure_outputs`` read from the accumulators' ``compute()``.

        Override it where a finding makes tables, corpus-level metrics or examples of its own.
        """
        out: Dict[str, Any] = {}
        for acc in self.accumulators.values():
            out.update(acc.compute())
        profiles = {name: out[name] for name in self.profiles if name in out}
        index = {name: out[self.profile_bins] for name in profiles} if self.profile_bins else {}
        figure_data = {name: out[name] for name in self.figure_outputs}
        return Summary(self.name, {name: out[name] for name in self.statistics}, profiles, figure_data=figure_data, windows=self.windows, profile_index=index)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        """Yield ``(artifact path, matplotlib figure)`` pairs, one figure alive at a time (none by default)."""
        return iter(())

    def pages(self, summary: Summary, plots_cfg: Any, title: str) -> Iterator[Tuple[str, str]]:
        """Yield ``(artifact path, HTML text)`` pages of the finding's own (e.g. an explorer), logged when
        ``plots.explorer`` is on (none by default; the run's ``explorer.html`` is the workflow's)."""
        return iter(())


@dataclass(frozen=True)
class Needs:
    """What a run's findings need from it, gathered from their declarations (:meth:`of`).

    Attributes:
        attention: a finding reads attention probabilities (``needs_attention``).
        gradients: predict runs the gradient capture (``needs_gradients``).
        interventions: an intervention finding (``needs_interventions``) runs its own passes.
        encoder_decoder: a finding measures an encoder–decoder's sentence pairs (``encoder_decoder``).
        residual: the capture record's names the residual-stream findings read (``residual``), empty for none.
        without_blockwise: names of the findings with no blockwise form (``blockwise`` false).
    """

    attention: bool = False
    gradients: bool = False
    interventions: bool = False
    encoder_decoder: bool = False
    without_blockwise: Tuple[str, ...] = ()
    residual: Tuple[str, ...] = ()

    @classmethod
    def of(cls, findings: Sequence[Any]) -> "Needs":
        """The needs of ``findings`` (finding classes or instances)."""
        return cls(
            attention=any(f.needs_attention for f in findings),
            gradients=any(f.needs_gradients for f in findings),
            interventions=any(f.needs_interventions for f in findings),
            encoder_decoder=any(f.encoder_decoder for f in findings),
            without_blockwise=tuple(f.name for f in findings if not f.blockwise),
            residual=tuple(dict.fromkeys(n for f in findings for n in getattr(f, "residual", ()))),
        )


def reduce_findings(findings: Sequence[Finding]) -> None:
    """Sum every finding's accumulators and window count over the ranks of a distributed predict, in place.

    Call it on every rank after ``trainer.predict`` (a collective, while the default
    ``torch.distributed`` process group is up): each rank then holds the statistics of the whole
    corpus, and rank 0 summarises and logs them alone. Each window is counted once provided the
    ranks' shards do not overlap (:class:`attnsim.data.module.ShardSampler`). Does nothing without
    an initialised process group or with one process.

    Args:
        findings: the run's finding callbacks, in the same order on every rank.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    device = torch.device("cpu")
    for finding in findings:
        for acc in finding.accumulators.values():
            acc.reduce_across_ranks()
            device = acc.device
    if dist.get_backend() != "nccl":  # gloo and mpi reduce CPU tensors; NCCL needs them on the GPU
        device = torch.device("cpu")
    windows = torch.tensor([f.windows for f in findings], dtype=torch.int64, device=device)
    dist.all_reduce(windows, op=dist.ReduceOp.SUM)
    for finding, total in zip(findings, windows.tolist()):
        finding.windows = int(total)


def view_factory(
    findings: Sequence[Finding], stats_cfg: Any, capture_path: str = "dense", block_rows: int = 256, keep: int = 1
) -> Callable[[Any, Dict[str, Any]], PairView]:
    """The per-batch view builder the workflow gives the capture module: ``(capture, batch) -> PairView``.

    Every finding's reducers are registered with each view up front, so that one walk over the
    batch's windows folds the sums of every statistic (:class:`~attnsim.stats.pairs.ChunkReducer`).

    Args:
        findings: the run's finding callbacks.
        stats_cfg: :class:`attnsim.config.StatsConfig` (high-pair rule, special tokens, normalisation).
        capture_path: ``dense`` (:class:`~attnsim.stats.pairs.PairView`) or ``blockwise``
            (:class:`~attnsim.stats.pairs.blocks.BlockPairView`, ``block_rows`` query rows per block), or ``recomputed``
            (:class:`~attnsim.stats.pairs.fused.RecomputedPairView`: the dense view, maps recomputed from queries and keys), or
            ``streamed`` (:class:`~attnsim.stats.pairs.streamed.StreamedViews`: the dense view opened before the forward pass,
            folding each layer's eager maps as they are computed).
        keep: the streamed path's windows per batch whose maps are kept for the example figures (``plots.examples``).

    Returns:
        :meth:`PairView.from_capture <attnsim.stats.pairs.PairView.from_capture>` with the run's settings
        (picklable, for DataLoader workers and DDP).
    """
    kinds: List[Type[ChunkReducer]] = []
    for finding in findings:
        for kind in finding.reducers():
            if kind not in kinds:  # a reducer shared by two findings runs once
                kinds.append(kind)
    s = stats_cfg
    settings = dict(
        top_fraction=s.top_fraction, high_rule=s.high_rule, zscore=s.zscore, include_special=s.include_special, normalise=s.normalise, reducers=tuple(kinds)
    )
    if capture_path == "streamed":
        from attnsim.stats.pairs.streamed import StreamedViews

        return StreamedViews(keep, **settings)
    if capture_path == "recomputed":
        from attnsim.stats.pairs.fused import RecomputedPairView

        return functools.partial(RecomputedPairView.from_capture, **settings)
    if capture_path == "blockwise":
        from attnsim.stats.pairs.blocks import BlockPairView

        return functools.partial(BlockPairView.from_capture, **settings, block_rows=block_rows)
    return functools.partial(PairView.from_capture, **settings)
