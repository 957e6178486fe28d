"""Finding ``separators``: attention to the first token ([CLS] / BOS), [SEP], "." and ",", newlines,
attention entropy and distance.

Source: Clark et al., "What Does BERT Look At?", BlackboxNLP 2019; for decoders the first token is
the "attention sink" (Xiao et al. 2024, "Efficient Streaming Language Models with Attention Sinks").
Definitions: :mod:`attnsim.stats.separators`. Token ids of each category come
from the context's tokenizer (:class:`~attnsim.findings.base.FindingContext`);
a causal model (``context.model.causal``) gets the chance levels of the keys
each query can see.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.common import layer_note, shown_layers
from attnsim.plots.heads import scalar_mosaic
from attnsim.plots.layers import by_layer, position_profile
from attnsim.stats.separators import CATEGORIES, EXTRA_CATEGORIES, SeparatorAccumulator, scalar_names


def separator_ids(tokenizer) -> Dict[str, List[int]]:  # noqa: ANN001
    """Token ids of each category: ``cls`` (the tokenizer's CLS, else BOS token; the statistic adds the
    first token of every window), ``sep`` (SEP, else EOS), ``period`` and ``comma`` (every single-token
    encoding of "." / "," with and without a leading space, and every token whose text under its offsets is
    the mark in "a. b" / "a . b": SentencePiece-style tokenizers split " ." into "▁" and "."), ``newline`` (every token whose text, in
    "a\\nb", "a\\n\\nb" and "a \\n b", is only whitespace holding a line break: GPT-2's ``Ċ``,
    SentencePiece's ``<0x0A>``; none for BERT, whose tokenizer drops line breaks).

    Raises:
        ValueError: no tokenizer was given.
    """
    if tokenizer is None:
        raise ValueError("The separators finding needs FindingContext(tokenizer=...) to find the ids of [CLS], [SEP], '.' and ','.")

    def special(*names: str) -> List[int]:
        for name in names:
            value = getattr(tokenizer, name, None)
            if value is not None:
                return [int(value)]
        return []

    def under(variants, wanted) -> List[int]:
        """Ids of the tokens whose text under their offsets, in any of ``variants``, passes ``wanted``."""
        ids = set()
        for variant in variants:
            encoded = tokenizer(variant, add_special_tokens=False, return_offsets_mapping=True)
            for token, (start, end) in zip(encoded["input_ids"], encoded["offset_mapping"]):
                if end > start and wanted(variant[start:end]):
                    ids.add(int(token))
        return sorted(ids)

    def text(mark: str) -> List[int]:
        ids = set(under((f"a{mark} b", f"a {mark} b"), lambda piece: piece.strip() == mark))
        for variant in (mark, f" {mark}"):  # a token that holds the mark with its space (e.g. "▁.")
            encoded = tokenizer(variant, add_special_tokens=False)["input_ids"]
            if len(encoded) == 1:
                ids.add(int(encoded[0]))
        return sorted(ids)

    def newline() -> List[int]:
        return under(("a\nb", "a\n\nb", "a \n b"), lambda piece: "\n" in piece and not piece.strip())

    return {
        "cls": special("cls_token_id", "bos_token_id"),
        "sep": special("sep_token_id", "eos_token_id"),
        "period": text("."),
        "comma": text(","),
        "newline": newline(),
    }


class SeparatorsFinding(Finding):
    """Attention mass on separator tokens beside uniform attention; attention entropy and mean distance."""

    name = "separators"
    figure_cost = 2.0  # measured against a finding of two figures (workflows/figures.py)
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "attention mass on the first token ([CLS]/BOS), [SEP], '.', ',' and newlines vs uniform, attention entropy and mean attention distance (Clark et al. 2019)"
    statistics = scalar_names(CATEGORIES + EXTRA_CATEGORIES)
    # attention by absolute position (text windows only): does the model rely on the start of the document?
    profiles = ("position_mass", "position_mass_chance")
    profile_bins = "position_bins"
    needs_attention = True

    def build(self):
        causal = bool(getattr(self.context.model, "causal", False))
        positions = None if self.context.vision else self.seq_len  # attention by absolute position (text windows)
        return {"separators": SeparatorAccumulator(self.n_layers, self.n_heads, separator_ids(self.context.tokenizer), causal, positions)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        s = summary.scalars
        yield "figures/separators/heads.png", scalar_mosaic(s, self.name)
        series = {
            "first token ([CLS]/BOS)": s["attention_cls"],
            "[SEP]/EOS": s["attention_sep"],
            '"."': s["attention_period"],
            '","': s["attention_comma"],
            "newline": s["attention_newline"],
            "union of the first four": s["attention_separators"],
        }
        yield (
            "figures/separators/by_layer.png",
            by_layer(
                series,
                "Attention mass on separator tokens",
                "attention mass per query",
                {"union of the first four": s["attention_separators_chance"]},
                heads=False,
            ),
        )
        if "position_mass" in summary.profiles:
            layers = shown_layers(self.n_layers, s["attention_cls"])  # extremes: the mass on the first token, where position 0's line starts
            note = layer_note(layers, self.n_layers, "mass on the first token")
            yield (
                "figures/separators/position_profile.png",
                position_profile(
                    summary.profiles["position_mass"], summary.profiles["position_mass_chance"], summary.profile_index["position_mass"], layers, note
                ),
            )
