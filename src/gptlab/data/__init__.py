"""Tokenizers, corpora (sources), the split rule, token stores, windows and GPTDataModule.

GPTDataModule is imported on first use: they pull in Lightning, which tools such as
scripts/prepare_data.py do not need (it takes seconds to import).
"""

from importlib import import_module
from typing import Any

from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer, Tokenizer

_LAZY = {"GPTDataModule": "gptlab.data.datamodule"}

__all__ = ["ByteTokenizer", "GPTDataModule", "TiktokenTokenizer", "Tokenizer"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gptlab.data' has no attribute {name!r}")
