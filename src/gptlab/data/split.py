"""The one train/val split rule, for every source and every token store, and the tokenization it feeds.

A document goes to validation when the CRC-32 of its UTF-8 text is below `val_fraction * 2**32`, so about
`val_fraction` of the documents are held out. The side depends on the text alone: not on document order, on
an id, on the store that reads it (memory, prepared shards or streaming) or on num_proc, so the same corpus has
the same validation set, and comparable val losses, whichever path trains on it; duplicates never straddle it.
Documents are tokenized in batches of fixed composition, each followed by end-of-text.
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
import zlib
from collections import deque
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from gptlab.data.shards import token_dtype
from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError
from gptlab.signals import stop_if_signalled

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
IN_FLIGHT = 2  # batches per worker queued or done but not yet written: what bounds the pool's memory


def _init_worker(tokenizer: Tokenizer, val_fraction: float, parent: int | None = None) -> None:
    _worker.update(tokenizer=tokenizer, val_fraction=val_fraction)
    if parent is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops the pool
        _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """A parent killed by SIGKILL runs no cleanup, and a worker blocked on the task queue would wait forever: on
    Linux the kernel kills the worker with its parent (prctl PR_SET_PDEATHSIG); elsewhere a thread polls."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    else:
        threading.Thread(target=_poll_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # it died before the request was made
        os._exit(1)


def _poll_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _encode_batch(texts: list[str]) -> Encoded:
    """Each document's ids then end-of-text, per split, in the shard's dtype (half the bytes to pass back for
    a vocabulary under 65,536)."""
    tok: Tokenizer = _worker["tokenizer"]
    sides = {split: [t for t in texts if is_val(t, _worker["val_fraction"]) == (split == "val")] for split in SPLITS}
    encode = getattr(tok, "encode_array", tok.encode)
    dtype = token_dtype(tok.vocab_size)
    eot = np.array([tok.eot_id], dtype=dtype)
    out = {}
    for split, docs in sides.items():
        parts = [part for text in docs for part in (np.asarray(encode(text)), eot)]
        out[split] = (np.concatenate(parts, dtype=dtype) if parts else np.empty(0, dtype=dtype), len(docs))
    return out


def _stop_if_signalled() -> None:
    stop_if_signalled("tokenizing the corpus, before training started")


def encode_batches(batches: Iterator[list[str]], tokenizer: Tokenizer, val_fraction: float,
                   num_proc: int) -> Iterator[Encoded]:
    """Encoded batches in input order. At most IN_FLIGHT * num_proc batches are handed to the pool and not yet
    taken back (a sliding window, so workers never wait on a slow one), so memory does not grow with the corpus."""
    if num_proc <= 1:
        _init_worker(tokenizer, val_fraction)
        for batch in batches:
            _stop_if_signalled()
            yield _encode_batch(batch)
        return
    init = (tokenizer, val_fraction, os.getpid())
    pool = multiprocessing.get_context().Pool(num_proc, _init_worker, init)
    window: deque = deque()
    try:
        for batch in batches:
            _stop_if_signalled()
            window.append(pool.apply_async(_encode_batch, (batch,)))
            if len(window) >= IN_FLIGHT * num_proc:
                yield window.popleft().get()
        while window:
            _stop_if_signalled()
            yield window.popleft().get()
    finally:
        _end_pool(pool, window)


def _end_pool(pool: Any, window: deque) -> None:
    """Ends the pool whatever stopped the loop (a bad document read here, a worker's error, a signal). Not by
    Pool.terminate while batches are in flight: it stops the pool's result reader first, so a worker still writing a
    result larger than the pipe holds the result queue's lock for good, and terminate waits on that lock forever
    (1 run in 20 with a bad line in a jsonl). The results in flight (at most IN_FLIGHT per worker, a second or two)
    are taken back and dropped, then the idle pool is closed and joined."""
    try:
        for pending in window:
            pending.wait()
        pool.close()
        pool.join()
    except BaseException:  # a second Ctrl-C while draining: the user insists, stop without waiting
        pool.terminate()
        raise


FILL_SCAN_DOCS = 100_000  # documents read again to find a val_fraction that fills the val split


def val_fraction_that_fills(documents: Iterable[str]) -> tuple[float | None, int]:
    """The smallest round data.val_fraction that puts at least one of `documents` (the first FILL_SCAN_DOCS) into
    validation and leaves one in training (None: none does), and how many distinct documents were read."""
    keys = sorted({zlib.crc32(t.encode("utf-8")) for _, t in zip(range(FILL_SCAN_DOCS), documents) if t})
    if len(keys) < 2:
        return None, len(keys)
    low, high = keys[0] / 2**32, keys[-1] / 2**32  # a fraction in (low, high] holds out the first, keeps the last
    for digits in range(1, 11):
        step = 10.0 ** -digits
        value = round(math.floor(low / step + 1) * step, digits)
        if low < value <= high and value < 1.0:
            return value, len(keys)
    return None, len(keys)


def check_splits_filled(tokens: dict[str, int], what: str, val_fraction: float,
                        documents: Callable[[], Iterable[str]] | None = None) -> None:
    """Both splits must hold tokens: fail naming the source and the setting to change. `documents`: the source's
    documents read again, to name a val_fraction that does fill the val split (without it, a doubled one)."""
    if not tokens["train"] and tokens["val"]:
        raise ConfigError(
            f"no document of {what} fell into the train split: data.val_fraction={val_fraction} holds out "
            "(nearly) every document for validation; lower data.val_fraction "
            f"(e.g. data.val_fraction={min(0.1, val_fraction / 2):g})."
        )
    if not tokens["train"]:
        raise ConfigError(f"the source {what} holds no text; check its paths, split and text field.")
    if not tokens["val"]:
        found, distinct = val_fraction_that_fills(documents()) if documents is not None else (None, None)
        if documents is not None and found is None:
            raise ConfigError(
                f"no document of {what} fell into the val split (data.val_fraction={val_fraction}), and no "
                f"val_fraction can split it: it holds {distinct} distinct document(s) and each split needs one "
                "(a .txt file is one document, a .jsonl line or .parquet row one); add documents.")
        value = found if found is not None else min(0.5, max(0.1, 2 * val_fraction))
        raise ConfigError(
            f"no document of {what} fell into the val split (data.val_fraction={val_fraction}); "
            f"raise data.val_fraction (e.g. data.val_fraction={value:g}) or add documents."
        )
