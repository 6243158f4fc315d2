"""Byte tokenizer, the document split, and the windows the model trains on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gptlab.data import ByteTokenizer, CorpusDataModule
from gptlab.data.corpus import build_split, split_documents
from gptlab.data.sources import pydocs_documents
from gptlab.data.windows import EpochSampler, RandomWindows, SequentialWindows
from gptlab.errors import ConfigError


def test_byte_tokenizer_round_trips_unicode_and_marks_document_ends() -> None:
    tok = ByteTokenizer()
    text = "naïve café — 東京 🚀"
    ids = tok.encode(text)
    assert max(ids) < 256 and tok.decode(ids) == text
    assert tok.decode(tok.encode("a") + [tok.eot_id] + tok.encode("b")) == "a<|endoftext|>b"


def test_pydocs_split_is_deterministic_disjoint_and_sized() -> None:
    docs = list(pydocs_documents())
    assert sum(len(t) for _, t in docs) > 400_000
    train, val = split_documents(docs, 0.05)
    train_ids, val_ids = {d for d, _ in train}, {d for d, _ in val}
    assert train_ids.isdisjoint(val_ids) and len(train_ids | val_ids) == len(docs)
    share = sum(len(t) for _, t in val) / sum(len(t) for _, t in docs)
    assert 0.05 <= share < 0.25
    # the same documents land in val whatever order the corpus comes in
    _, val_again = split_documents(list(reversed(docs)), 0.05)
    assert {d for d, _ in val_again} == val_ids


def test_documents_are_joined_by_end_of_text() -> None:
    docs = [("a", "xy"), ("b", "z"), ("c", "hello world, a longer document")]
    split = build_split(docs, ByteTokenizer(), 0.1)
    assert split.train.dtype == np.uint16
    assert (split.train == 256).sum() == split.n_train_docs and split.train[-1] == 256


def test_random_windows_are_shifted_pairs_and_reproducible() -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    ds = RandomWindows(tokens, block_size=16, samples_per_epoch=10, seed=3)
    x, y = ds[5]
    assert x.shape == y.shape == (16,) and x.dtype == torch.int64
    torch.testing.assert_close(y[:-1], x[1:])
    torch.testing.assert_close(ds[5][0], RandomWindows(tokens, 16, 10, seed=3)[5][0])
    assert not torch.equal(ds[5][0], ds[6][0])


def test_sequential_windows_cover_the_split_once() -> None:
    tokens = np.arange(100, dtype=np.uint16)
    ds = SequentialWindows(tokens, block_size=10)
    assert len(ds) == 9
    assert torch.cat([ds[i][0] for i in range(len(ds))]).tolist() == list(range(90))


def test_epoch_sampler_splits_ranks_and_moves_on_each_epoch() -> None:
    ranks = [EpochSampler(10, rank=r, world_size=2) for r in range(2)]
    first = [list(s) for s in ranks]
    assert set(first[0]).isdisjoint(first[1]) and set(first[0]) | set(first[1]) == set(range(10))
    ranks[0].set_epoch(1)
    assert set(ranks[0]).isdisjoint(first[0])


def test_block_size_longer_than_the_split_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="block_size"):
        RandomWindows(np.arange(10, dtype=np.uint16), block_size=16, samples_per_epoch=1)


def test_datamodule_serves_batches_of_the_right_shape() -> None:
    dm = CorpusDataModule(ByteTokenizer(), block_size=32, batch_size=4)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 32) and int(x.max()) < 257
    assert len(dm.val_set) > 10


def test_unknown_source_names_the_field() -> None:
    with pytest.raises(ConfigError, match="data.source"):
        CorpusDataModule(ByteTokenizer(), source="nope")
