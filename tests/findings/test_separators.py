"""attnsim.findings.separators: its functions on hand-worked inputs."""

from __future__ import annotations

from attnsim.findings.separators import separator_ids
from tests.helpers.findings import CLS, PERIOD, SEP


def test_separator_ids_from_the_bundled_tokenizer():
    from transformers import AutoTokenizer

    from tests.helpers.models import BUNDLED

    ids = separator_ids(AutoTokenizer.from_pretrained(BUNDLED))
    assert ids == {"cls": [CLS], "sep": [SEP], "period": [PERIOD], "comma": [1010], "newline": []}  # BERT drops line breaks
