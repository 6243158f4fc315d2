"""Turn documents into train/val token arrays, documents joined by end-of-text."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError


@dataclass
class Split:
    train: np.ndarray
    val: np.ndarray
    n_train_docs: int
    n_val_docs: int


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def split_documents(
    documents: Iterable[tuple[str, str]], val_fraction: float
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Deterministic split by document: documents ordered by a hash of their id fill the val set until it
    holds `val_fraction` of the characters. A document's side depends only on its id and the corpus,
    not on iteration order, and no document straddles the split."""
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction={val_fraction!r} must be in (0, 1).")
    docs = list(documents)
    if len(docs) < 2:
        raise ConfigError(f"the corpus has {len(docs)} document(s); a train/val split needs at least 2.")
    total = sum(len(text) for _, text in docs)
    by_hash = sorted(docs, key=lambda d: (zlib.crc32(d[0].encode("utf-8")), d[0]))
    val, size = [], 0
    for doc in by_hash[:-1]:  # at least one document stays in train
        if size >= val_fraction * total:
            break
        val.append(doc)
        size += len(doc[1])
    val_ids = {doc_id for doc_id, _ in val}
    train = [d for d in docs if d[0] not in val_ids]
    return train, val


def tokenize_documents(documents: Iterable[tuple[str, str]], tokenizer: Tokenizer) -> np.ndarray:
    """Each document followed by end-of-text, so the model learns where documents end."""
    ids: list[int] = []
    for _, text in documents:
        ids.extend(tokenizer.encode(text))
        ids.append(tokenizer.eot_id)
    return np.asarray(ids, dtype=token_dtype(tokenizer.vocab_size))


def build_split(documents: Iterable[tuple[str, str]], tokenizer: Tokenizer, val_fraction: float) -> Split:
    train_docs, val_docs = split_documents(documents, val_fraction)
    return Split(
        train=tokenize_documents(train_docs, tokenizer),
        val=tokenize_documents(val_docs, tokenizer),
        n_train_docs=len(train_docs),
        n_val_docs=len(val_docs),
    )
