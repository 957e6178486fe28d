"""Corpus sources, sentence segmentation, fixed-length windows and the DataModule."""

from attnsim.data.module import WindowDataModule, collate_windows
from attnsim.data.sources import Document, read_documents
from attnsim.data.windows import Corpus, Window, build_corpus

__all__ = ["Document", "read_documents", "Window", "Corpus", "build_corpus", "WindowDataModule", "collate_windows"]
