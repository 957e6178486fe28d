"""What every corpus offers the run workflow (:class:`MeasuredCorpus`), whatever its items are.

Text windows (:class:`attnsim.data.windows.Corpus`, documents or repeated random tokens), images
(:class:`attnsim.data.images.ImageCorpus`), sentence pairs of an encoder–decoder
(:class:`attnsim.data.translation.PairCorpus`) and the prompt pairs of activation patching
(:class:`attnsim.data.prompt_pairs.PromptPairCorpus`) all offer these members, so that the workflow serves, tags
and measures any of them without asking which it holds.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable


@runtime_checkable
class MeasuredCorpus(Protocol):
    """The members the run workflow reads from a corpus.

    Attributes:
        seq_len: tokens per item as tagged (``attnsim.seq_len``): a window's T, an image's extra tokens
            plus patches, a sentence pair's source length, a prompt pair's longest prompt.
        measured_len: T of the maps the findings fold (their ``seq_len``): ``seq_len``, but the target
            length of sentence pairs (the decoder's positions).
        layout: the images' token layout (extra tokens and patch grid,
            :class:`attnsim.data.layout.TokenLayout`); None for text.
        documents_used: documents (images, pairs) the items came from.
        content_hash: SHA-256 of what is measured (hex), tagged and logged with the dataset input.
    """

    seq_len: int
    documents_used: int

    @property
    def measured_len(self) -> int: ...  # pragma: no cover - protocol

    @property
    def layout(self) -> Optional[Any]: ...  # pragma: no cover - protocol

    @property
    def content_hash(self) -> str: ...  # pragma: no cover - protocol

    def __len__(self) -> int: ...  # pragma: no cover - protocol

    def datamodule(self, batch_size: int, num_workers: int = 0) -> Any:
        """The LightningDataModule serving the items as batches (``predict_dataloader``)."""
        ...  # pragma: no cover - protocol


class TextItems:
    """What a corpus of text items offers :class:`MeasuredCorpus` unless it says otherwise: the findings' T is
    ``seq_len``, and there is no image layout. Text windows, sentence pairs and prompt pairs inherit it."""

    seq_len: int

    @property
    def measured_len(self) -> int:
        """T of the findings' maps: ``seq_len``."""
        return self.seq_len

    @property
    def layout(self) -> None:
        """No image layout: text."""
        return None


__all__ = ["MeasuredCorpus", "TextItems"]
