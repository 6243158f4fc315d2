"""The one train/val split rule, for every source and every token store, and the tokenization it feeds.

A document goes to validation when the CRC-32 of its UTF-8 text is below `val_fraction * 2**32`, so about
`val_fraction` of the documents are held out. The side depends on the text alone: not on document order, on
an id, on the store that reads it (memory, prepared shards or streaming) or on num_proc, so the same corpus has
the same validation set, and comparable val losses, whichever path trains on it; duplicates never straddle it.
Documents are tokenized in batches of fixed composition, each followed by end-of-text.
"""

from __future__ import annotations

import multiprocessing
import zlib
from itertools import islice
from typing import Any, Iterable, Iterator

import numpy as np

from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError

SPLITS = ("train", "val")
BATCH_DOCS, BATCH_CHARS = 256, 1 << 20  # a tokenization task: up to 256 documents or ~1M characters

Encoded = dict[str, tuple[np.ndarray, int]]  # per split: the batch's token ids (each document + eot), documents


def is_val(text: str, val_fraction: float) -> bool:
    return zlib.crc32(text.encode("utf-8")) < val_fraction * 2**32


def check_val_fraction(val_fraction: float) -> None:
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction={val_fraction!r} must be in (0, 1).")


def doc_batches(texts: Iterable[str]) -> Iterator[list[str]]:
    """Group documents into tasks by count and size only, so the grouping never depends on num_proc."""
    batch, chars = [], 0
    for text in texts:
        if not text:
            continue  # an empty document would add a lone end-of-text
        batch.append(text)
        chars += len(text)
        if len(batch) >= BATCH_DOCS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


_worker: dict[str, Any] = {}


def _init_worker(tokenizer: Tokenizer, val_fraction: float) -> None:
    _worker.update(tokenizer=tokenizer, val_fraction=val_fraction)


def _encode_batch(texts: list[str]) -> Encoded:
    tok: Tokenizer = _worker["tokenizer"]
    sides = {split: [t for t in texts if is_val(t, _worker["val_fraction"]) == (split == "val")] for split in SPLITS}
    encode = getattr(tok, "encode_array", tok.encode)
    eot = np.array([tok.eot_id], dtype=np.uint32)
    out = {}
    for split, docs in sides.items():
        parts = [part for text in docs for part in (np.asarray(encode(text), dtype=np.uint32), eot)]
        out[split] = (np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32), len(docs))
    return out


def encode_batches(batches: Iterator[list[str]], tokenizer: Tokenizer, val_fraction: float,
                   num_proc: int) -> Iterator[Encoded]:
    """Encoded batches in input order. A pool is fed a bounded group at a time so memory stays flat."""
    if num_proc <= 1:
        _init_worker(tokenizer, val_fraction)
        yield from (_encode_batch(b) for b in batches)
        return
    with multiprocessing.get_context().Pool(num_proc, _init_worker, (tokenizer, val_fraction)) as pool:
        while group := list(islice(batches, 4 * num_proc)):
            yield from pool.imap(_encode_batch, group)


def check_splits_filled(tokens: dict[str, int], what: str, val_fraction: float) -> None:
    """Both splits must hold tokens: fail naming the source and the setting to change."""
    if not tokens["train"]:
        raise ConfigError(f"the source {what} holds no text; check its paths, split and text field.")
    if not tokens["val"]:
        raise ConfigError(
            f"no document of {what} fell into the val split (data.val_fraction={val_fraction}); "
            "raise data.val_fraction or add documents."
        )
