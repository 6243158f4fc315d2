"""Tokenizers share one small interface so the corpora, shards and the model need not care which.

`bytes` needs no file: ids 0..255 are UTF-8 bytes and 256 is end-of-text.
"""

from __future__ import annotations

from typing import Protocol


class Tokenizer(Protocol):
    name: str
    vocab_size: int  # number of ids, end-of-text included
    eot_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes plus one end-of-text id: 257 ids, lossless on any text."""

    name = "bytes"
    vocab_size = 257
    eot_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        # The end-of-text id is shown as a newline-separated marker, not silently dropped.
        out, chunk = [], bytearray()
        for i in ids:
            if i == self.eot_id:
                out.append(chunk.decode("utf-8", errors="replace"))
                out.append("<|endoftext|>")
                chunk = bytearray()
            else:
                chunk.append(i)
        out.append(chunk.decode("utf-8", errors="replace"))
        return "".join(out)
