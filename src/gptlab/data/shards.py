"""Binary token shards: a 256-byte header, then the tokens as little-endian uint16 (vocab <= 65536) or uint32.

The header repeats what the manifest says (tokenizer, vocab size, dtype, token count) so that a shard on its
own is self-describing and a truncated one is caught before training reads garbage.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gptlab.atomic import AtomicFile
from gptlab.errors import ConfigError

MAGIC = b"GPTLABTK"
VERSION = 1
HEADER_BYTES = 256
_LAYOUT = struct.Struct("<8sHHIIQQ32s")  # magic, version, itemsize, vocab, eot, tokens, documents, tokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


@dataclass(frozen=True)
class ShardHeader:
    tokenizer: str
    vocab_size: int
    eot_id: int
    n_tokens: int
    n_documents: int

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.vocab_size)

    def pack(self) -> bytes:
        raw = _LAYOUT.pack(MAGIC, VERSION, self.dtype.itemsize, self.vocab_size, self.eot_id, self.n_tokens,
                           self.n_documents, self.tokenizer.encode("utf-8")[:32])
        return raw.ljust(HEADER_BYTES, b"\0")


class ShardFile:
    """A shard written as its tokens arrive, so a writer holds one batch, never a whole shard (100M tokens by
    default): a placeholder header, the tokens appended, then the real header (counts known only at the end)
    written over it before the rename."""

    def __init__(self, path: Path, tokenizer: str, vocab_size: int, eot_id: int) -> None:
        self.header = ShardHeader(tokenizer, vocab_size, eot_id, 0, 0)
        self.target = AtomicFile(path, mode=0o644)  # shards are data for everyone on the machine
        self.target.write(bytes(HEADER_BYTES))

    def append(self, tokens: np.ndarray, n_documents: int) -> None:
        self.target.write(np.ascontiguousarray(tokens, dtype=self.header.dtype).tobytes())
        self.header = replace(self.header, n_tokens=self.header.n_tokens + len(tokens),
                              n_documents=self.header.n_documents + n_documents)

    def commit(self) -> str:
        """Put the header in, rename the file into place; return its sha256 (read back: the header that starts
        the file is known last)."""
        self.target.file.seek(0)
        self.target.write(self.header.pack())
        self.target.file.flush()
        digest = hashlib.sha256()
        self.target.file.seek(0)
        for block in iter(lambda: self.target.file.read(1 << 20), b""):
            digest.update(block)
        self.target.commit()
        return digest.hexdigest()

    def discard(self) -> None:
        self.target.discard()


def read_header(path: Path) -> ShardHeader:
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
        raise ConfigError(f"{path} is not a gptlab token shard (bad header); delete it, re-run prepare_data.py.")
    magic, version, itemsize, vocab, eot, n_tokens, n_docs, name = _LAYOUT.unpack(raw[: _LAYOUT.size])
    if version != VERSION:
        raise ConfigError(f"{path} has shard format {version}, this gptlab reads {VERSION}; delete it, re-run "
                          "prepare_data.py.")
    header = ShardHeader(name.rstrip(b"\0").decode("utf-8"), vocab, eot, n_tokens, n_docs)
    if header.dtype.itemsize != itemsize:
        raise ConfigError(f"{path}: header says {itemsize}-byte tokens for a {vocab}-id vocab; the file is corrupt: "
                          "delete it, re-run prepare_data.py.")
    return header


def open_shard(path: Path) -> np.memmap:
    """Memory-map a shard's tokens after checking that the file holds exactly what its header says."""
    if not path.is_file():
        raise ConfigError(f"shard {path} is missing; re-run scripts/prepare_data.py to rebuild it.")
    header = read_header(path)
    expected = HEADER_BYTES + header.n_tokens * header.dtype.itemsize
    actual = path.stat().st_size
    if actual != expected:
        raise ConfigError(
            f"shard {path} has {actual} bytes but its header promises {expected} ({header.n_tokens} tokens): it is "
            "truncated or corrupt; delete it and re-run scripts/prepare_data.py."
        )
    return np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_BYTES, shape=(header.n_tokens,))


class ShardedTokens:
    """Several shards read as one 1-D token array (len and slicing), so window datasets need not know about
    shard boundaries. Shards hold consecutive parts of one document stream, so a window may span two."""

    def __init__(self, arrays: list[np.ndarray], vocab_size: int | None = None,
                 names: list[str] | None = None) -> None:
        """`vocab_size`: refuse a window holding a larger id, naming its shard (`names`); for shards not verified
        by their sha256 (data.verify_sha256=false), whose corruption the model's embedding would meet as an
        IndexError."""
        self.names = [n for n, a in zip(names or [""] * len(arrays), arrays) if len(a)]
        self.vocab_size = vocab_size
        self.arrays = [a for a in arrays if len(a)]
        self.offsets = [0]  # a list, not numpy: bisect on Python ints is several times faster per lookup
        for a in self.arrays:
            self.offsets.append(self.offsets[-1] + len(a))
        self.dtype = self.arrays[0].dtype if self.arrays else np.dtype("<u2")

    def __len__(self) -> int:
        return self.offsets[-1]

    def __getitem__(self, item: slice) -> np.ndarray:
        window = self._slice(item)
        if self.vocab_size is not None and len(window) and int(window.max()) >= self.vocab_size:
            start = item.indices(len(self))[0]
            shard = self.names[bisect.bisect_right(self.offsets, start) - 1]
            raise ConfigError(f"shard {shard} holds token id {int(window.max())}, beyond the vocabulary "
                              f"({self.vocab_size} ids): it is corrupt. Delete it and run `python "
                              "scripts/prepare_data.py` with the same data and tokenizer (data.verify_sha256=true, "
                              "the default, finds every modified shard at the start).")
        return window

    def _slice(self, item: slice) -> np.ndarray:
        start, stop, step = item.indices(len(self))
        if step != 1:
            raise IndexError("ShardedTokens supports contiguous slices only")
        if start >= stop:
            return np.empty(0, dtype=self.dtype)
        k = bisect.bisect_right(self.offsets, start) - 1
        if stop <= self.offsets[k + 1]:  # the common case: inside one shard, a view
            return self.arrays[k][start - self.offsets[k] : stop - self.offsets[k]]
        parts, pos = [], start
        while pos < stop:
            parts.append(self.arrays[k][pos - self.offsets[k] : min(stop, self.offsets[k + 1]) - self.offsets[k]])
            pos, k = self.offsets[k + 1], k + 1
        return np.concatenate(parts)
