"""Tokenizers, corpora, token windows and the DataModules."""

from gptlab.data.datamodule import CorpusDataModule
from gptlab.data.token_datamodule import TokenDataModule
from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer, Tokenizer

__all__ = ["ByteTokenizer", "CorpusDataModule", "TiktokenTokenizer", "TokenDataModule", "Tokenizer"]
