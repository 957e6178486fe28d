"""Finding ``anchors``: each head's most common token in high-CSM pairs (arXiv:2512.21956).

Definitions: :mod:`attnsim.stats.anchors`. Needs the context's ``vocab_size``
(and its ``tokenizer`` to name the tokens; ids are used without it).
"""

from __future__ import annotations

from typing import Any, Iterator, List, Tuple

import pandas as pd

from attnsim.data.windows import readable_tokens
from attnsim.findings.base import Finding, Summary
from attnsim.plots.anchors import anchor_table
from attnsim.plots.heads import scalar_mosaic
from attnsim.stats.anchors import SCALARS, AnchorAccumulator

TOP_ANCHORS = 5  # anchors per head in the anchor table


class AnchorsFinding(Finding):
    """Anchor share, each head's top anchor tokens and their consistency, distinct anchors per layer."""

    name = "anchors"
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "anchor token of high-CSM pairs per head: share, most frequent anchors, consistency, distinct anchors per layer"
    statistics = SCALARS
    needs_attention = False

    def build(self):
        if self.context.vocab_size is None:
            raise ValueError("The anchors finding needs FindingContext(vocab_size=...) (the tokenizer's len) to count anchor token ids.")
        return {"anchors": AnchorAccumulator(self.n_layers, self.n_heads, int(self.context.vocab_size))}

    def token_names(self, ids: List[int]) -> List[str]:
        """Readable labels of ``ids``, each on its own (:func:`~attnsim.data.windows.readable_tokens`:
        ``Ġcafé`` -> ``café``, ``Ġ`` -> ``␣``); the ids as text without a tokenizer."""
        tokenizer = self.context.tokenizer
        return [readable_tokens(tokenizer, [i])[0] for i in ids]

    def summarise(self) -> Summary:
        acc = self.accumulators["anchors"]
        out = acc.compute()
        ids, counts = acc.top_anchors(TOP_ANCHORS)  # (L, H, K) each
        windows = acc.windows  # (L, H)
        rows = []
        for layer in range(self.n_layers):
            for head in range(self.n_heads):
                kept = [(int(i), float(c)) for i, c in zip(ids[layer, head].tolist(), counts[layer, head].tolist()) if c > 0]
                names = self.token_names([i for i, _ in kept])
                for rank, ((token_id, count), token) in enumerate(zip(kept, names), start=1):
                    rows.append(
                        {
                            "layer": layer,
                            "head": head,
                            "rank": rank,
                            "token_id": token_id,
                            "token": token,
                            "windows": count,
                            "share": count / float(windows[layer, head]),
                        }
                    )
        table = pd.DataFrame(rows, columns=["layer", "head", "rank", "token_id", "token", "windows", "share"])
        top = out["top_anchor"]
        top_tokens = [self.token_names([max(int(i), 0) for i in row]) for row in top.tolist()]
        top_tokens = [[name if int(i) >= 0 else "" for name, i in zip(names, row)] for names, row in zip(top_tokens, top.tolist())]
        figure_data = {"top_anchor": top, "top_anchor_tokens": top_tokens}
        return Summary(self.name, {n: out[n] for n in SCALARS}, tables={"tables/anchors_top.csv": table}, figure_data=figure_data, windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield "figures/anchors/heads.png", scalar_mosaic(summary.scalars, self.name)
        yield "figures/anchors/anchor_tokens.png", anchor_table(summary.figure_data["top_anchor_tokens"], summary.scalars["anchor_consistency"])
