"""Tokenizers, corpora, token windows and the DataModule."""

from gptlab.data.datamodule import CorpusDataModule
from gptlab.data.tokenizers import ByteTokenizer, Tokenizer

__all__ = ["ByteTokenizer", "CorpusDataModule", "Tokenizer"]
