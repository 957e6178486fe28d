"""Finding ``alignment``: encoder–decoder cross-attention as a source/target alignment, and CSM of the decoder's heads.

Runs on T5, BART and Marian models with ``corpus.source=translation`` (teacher-forced; row i of every
decoder map is the step that predicts target token i, :mod:`attnsim.capture.seq2seq`). Statistics per
decoder layer and head:

- ``band_mass``, ``band_mass_chance``, ``band_excess``: cross-attention mass on the monotone diagonal
  band of half-width ``stats.band_width`` and its chance value (:mod:`attnsim.stats.alignment`);
- ``self_mean``, ``self_std``: CSM (Z Zᵀ, diagonal 0) of the decoder *self*-attention heads' outputs over
  the target tokens, pairs i < j of real tokens, as the ``csm`` finding defines them
  (:mod:`attnsim.stats.csm`); ``cross_mean``, ``cross_std``: the same for the cross-attention heads'
  outputs. Profiles ``self_distance_mean`` and ``cross_distance_mean``: mean CSM by distance j − i.

Figures: the corpus cross-attention map of every head in relative positions (plus the layer mean), the
cross-attention of the first ``plots.examples`` pairs with token labels and the band outlined, one
layer × head heatmap per statistic (``heads.png``), and (``plots.explorer``) an explorer page whose attention panel
shows each example's whole attention over [source tokens; target tokens]: encoder self-attention
(top left), cross-attention (bottom left: target rows, source columns) and decoder self-attention
(bottom right); the top right block is undefined.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import torch

from attnsim.data.translation import pair_labels
from attnsim.findings.base import Finding, Summary
from attnsim.plots.alignment import cross_attention_grid
from attnsim.plots.heads import scalar_mosaic
from attnsim.stats.alignment import SCALARS as BAND_SCALARS
from attnsim.stats.alignment import AlignmentAccumulator, band_mask
from attnsim.stats.csm import SCALARS as CSM_SCALARS
from attnsim.stats.csm import CSMAccumulator, CSMPairSums
from attnsim.stats.pairs import PairView

CSM_STREAMS = ("self", "cross")  # decoder self-attention heads, decoder cross-attention heads
_CAPTURED = {"self": "decoder", "cross": "cross"}  # stream -> Seq2SeqCapture key


def _labels(tokenizer: Any, batch: Dict[str, Any], b: int, keys: Tuple[str, str, str, str], n: int) -> List[str]:
    """Token labels of the first ``n`` tokens of one side (ids, offsets, special mask, text keys) of pair ``b``."""
    ids, offsets, special, text = keys
    return pair_labels(tokenizer, batch[ids][b, :n].tolist(), batch[offsets][b, :n].cpu().numpy(), batch[special][b, :n].cpu().numpy(), batch[text][b])


class AlignmentFinding(Finding):
    """Cross-attention alignment (band mass beside chance, maps) and decoder CSM (see module docstring).

    ``seq_len`` is T, the target tokens per pair (``corpus.target_len``): every statistic is over target tokens.
    """

    name = "alignment"
    description = "encoder-decoder cross-attention maps (target x source), mass on the monotone diagonal band beside chance, CSM of the decoder's self- and cross-attention heads"
    statistics = BAND_SCALARS + tuple(f"{stream}_{stat}" for stream in CSM_STREAMS for stat in CSM_SCALARS)
    needs_attention = True
    config_keys = ("stats.band_width",)
    encoder_decoder = True  # needs an encoder–decoder model and a translation corpus (checked before the model loads)

    def build(self):
        self.examples: List[Dict[str, Any]] = []
        width = float(getattr(self.cfg, "band_width", 0.1))
        accumulators = {"band": AlignmentAccumulator(self.n_layers, self.n_heads, width)}
        for stream in CSM_STREAMS:
            accumulators[f"{stream}_csm"] = CSMAccumulator(self.n_layers, self.n_heads, self.seq_len)
        return accumulators

    def _view(self, vectors: Tuple[torch.Tensor, ...], batch: Dict[str, Any]) -> PairView:
        """The CSM view of the decoder's per-head outputs over the target tokens (one sentence per target)."""
        real = batch["target_mask"]
        special = batch["target_special"]
        target = {
            "input_ids": batch["target_ids"],
            "attention_mask": real,
            "special_mask": special,
            "sentence_ids": torch.where(real.bool() & ~special, 0, -1),
            "unknown_mask": torch.zeros_like(special),
        }
        s = self.cfg
        return PairView(
            vectors,
            target,
            None,
            top_fraction=s.top_fraction,
            high_rule=s.high_rule,
            zscore=s.zscore,
            include_special=s.include_special,
            normalise=s.normalise,
            reducers=(CSMPairSums,),
        )

    def update(self, view: Any) -> None:  # a Seq2SeqBatch (attnsim.capture.seq2seq)
        capture, batch = view.capture, view.batch
        self.accumulators["band"].update(capture.attention["cross"], batch["attention_mask"], batch["target_mask"])
        for stream in CSM_STREAMS:
            pairs = self._view(capture.z[_CAPTURED[stream]], batch)
            self.accumulators[f"{stream}_csm"].update(pairs)
            pairs.release()
        self._record(capture, batch)
        self.windows += view.batch_size

    def _record(self, capture: Any, batch: Dict[str, Any]) -> None:
        """Keep the first ``plots.examples`` pairs' attention maps (real tokens only) and token labels."""
        tokenizer = self.context.tokenizer
        for b in range(int(batch["input_ids"].shape[0])):
            if len(self.examples) >= self.context.examples:
                return
            n_s, n_t = int(batch["attention_mask"][b].sum()), int(batch["target_mask"][b].sum())

            self.examples.append(
                {
                    "doc_id": batch["doc_ids"][b],
                    "source_labels": _labels(tokenizer, batch, b, ("input_ids", "source_offsets", "special_mask", "sources"), n_s),
                    "target_labels": _labels(tokenizer, batch, b, ("target_ids", "target_offsets", "target_special", "targets"), n_t),
                    "cross": torch.stack([a[b, :, :n_t, :n_s] for a in capture.attention["cross"]]).float().cpu(),  # (L, H, n_t, n_s)
                    "decoder": torch.stack([a[b, :, :n_t, :n_t] for a in capture.attention["decoder"]]).float().cpu(),
                    "encoder": torch.stack([a[b, :, :n_s, :n_s] for a in capture.attention["encoder"]]).float().cpu(),  # encoder layers
                }
            )

    def summarise(self) -> Summary:
        band = self.accumulators["band"].compute()
        scalars = {name: band[name] for name in BAND_SCALARS}
        profiles = {}
        for stream in CSM_STREAMS:
            out = self.accumulators[f"{stream}_csm"].compute()
            scalars.update({f"{stream}_{stat}": out[stat] for stat in CSM_SCALARS})
            profiles[f"{stream}_distance_mean"] = out["distance_mean"]
        return Summary(self.name, scalars, profiles, figure_data={"corpus_map": band["corpus_map"]}, examples=list(self.examples), windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield "figures/alignment/heads.png", scalar_mosaic(summary.scalars, self.name)
        corpus_map = summary.figure_data["corpus_map"].cpu().numpy()
        yield (
            "figures/alignment/corpus_cross_attention.png",
            cross_attention_grid(
                corpus_map,
                f"Corpus cross-attention in relative positions ({summary.windows} pairs; {corpus_map.shape[-1]} bins of each sentence's length)",
                max_tokens=plots_cfg.max_tokens,
                row_axis="target position bin",
                col_axis="source position bin",
            ),
        )
        width = float(getattr(self.cfg, "band_width", 0.1))
        for index, example in enumerate(summary.examples):
            n_t, n_s = example["cross"].shape[-2:]
            yield (
                f"figures/alignment/example_{index:02d}_cross_attention.png",
                cross_attention_grid(
                    example["cross"].numpy(),
                    f"Cross-attention of pair {example['doc_id']} (band |i/n_t - j/n_s| <= {width:g} outlined)",
                    example["target_labels"],
                    example["source_labels"],
                    plots_cfg.max_tokens,
                    band=band_mask(n_t, n_s, width).numpy(),
                ),
            )

    def pages(self, summary: Summary, plots_cfg: Any, title: str) -> Iterator[Tuple[str, str]]:
        """The explorer page of the example pairs: ``(artifact path, HTML)`` (see module docstring)."""
        from attnsim.plots.explorer import explorer_data, explorer_html

        if not summary.examples:
            return
        first = summary.examples[0]
        n_layers, n_heads = first["cross"].shape[:2]
        enc_layers = first["encoder"].shape[0]
        width = max(len(e["source_labels"]) + len(e["target_labels"]) for e in summary.examples)
        joint = np.full((n_layers, len(summary.examples), n_heads, width, width), np.nan)
        for e, example in enumerate(summary.examples):
            n_s, n_t = len(example["source_labels"]), len(example["target_labels"])
            joint[:, e, :, n_s : n_s + n_t, :n_s] = example["cross"].numpy()
            joint[:, e, :, n_s : n_s + n_t, n_s : n_s + n_t] = example["decoder"].numpy()
            if enc_layers == n_layers and example["encoder"].shape[1] == n_heads:  # the encoder block where its shape matches the decoder's
                joint[:, e, :, :n_s, :n_s] = example["encoder"].numpy()
        tokens = [[f"src {t}" for t in e["source_labels"]] + [f"tgt {t}" for t in e["target_labels"]] for e in summary.examples]
        lengths = [len(t) for t in tokens]
        for t in tokens:
            t.extend([""] * (width - len(t)))
        data = explorer_data(None, joint, tokens, lengths, [e["doc_id"] for e in summary.examples], plots_cfg.max_tokens)
        yield (
            "explorer_alignment.html",
            explorer_html(data, title + " (attention over [source; target]: encoder, cross (target rows x source columns), decoder)"),
        )
