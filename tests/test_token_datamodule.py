"""The prepared store through GPTDataModule: memmapped windows, disjoint ranks, and a real training run."""

from types import SimpleNamespace
from unittest.mock import ANY

import numpy as np
import pytest
import torch
from helpers import compose_config

from gptlab.apps.train import train
from gptlab.data import GPTDataModule
from gptlab.data.shards import ShardedTokens
from gptlab.data.sources import TextFiles
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.errors import ConfigError

BLOCK = 32


def datamodule(corpus, tmp_path, rank=0, world=1, store="prepared", **kwargs) -> GPTDataModule:
    dm = GPTDataModule(ByteTokenizer(), TextFiles([str(p) for p in corpus]), store, block_size=BLOCK, batch_size=8,
                       cache_dir=str(tmp_path / "c"), val_fraction=0.1, shard_tokens=5000, num_proc=1, **kwargs)
    dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, accumulate_grad_batches=1)  # as Lightning attaches
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_sharded_tokens_slice_like_one_array():
    arrays = [np.arange(0, 5), np.arange(5, 5), np.arange(5, 12), np.arange(12, 20)]
    tokens, whole = ShardedTokens(arrays), np.arange(20)
    assert len(tokens) == 20
    for start, stop in [(0, 20), (3, 9), (5, 12), (11, 13), (4, 5), (19, 20), (7, 7)]:
        np.testing.assert_array_equal(tokens[start:stop], whole[start:stop])


@pytest.mark.parametrize("store", ["prepared", "memory"])
def test_two_ranks_read_disjoint_windows_covering_an_epoch(corpus, tmp_path, store):
    starts = []
    for rank in (0, 1):
        dm = datamodule(corpus, tmp_path, rank, 2, store, sampling="epoch")
        if store == "prepared":
            assert len(dm.store.tokens["train"].arrays) > 1  # windows are cut across shard boundaries too
        sampler = dm.train_dataloader().sampler
        starts.append([dm.store.train_set.window_start(i) for i in sampler])
        x, y = dm.store.train_set[next(iter(sampler))]
        assert torch.equal(x[1:], y[:-1]) and x.shape == (BLOCK,)
    n = len(dm.store.train_set)
    assert n == (len(dm.store.tokens["train"]) - 1) // BLOCK  # every window, however many ranks
    used = n // 16 * 16  # whole steps of 2 ranks x 8 windows: the shuffled order's tail waits for the next epoch
    assert len(starts[0]) == len(starts[1]) == used // 2
    assert not set(starts[0]) & set(starts[1])
    assert sorted(starts[0] + starts[1]) == sorted(dm.store.train_set.window_start(i) for i in range(used))
    assert len(set(starts[0] + starts[1])) == used and all(s % BLOCK == 0 for s in starts[0])


def test_random_windows_come_from_the_memmapped_shards(corpus, tmp_path):
    dm = datamodule(corpus, tmp_path)
    assert all(isinstance(a, np.memmap) for a in dm.store.tokens["train"].arrays)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, BLOCK) and torch.equal(x[:, 1:], y[:, :-1])
    flat = dm.store.tokens["train"][0 : len(dm.store.tokens["train"])]
    row = x[0].numpy()
    hits = np.flatnonzero(np.all(np.lib.stride_tricks.sliding_window_view(flat, BLOCK) == row, axis=1))
    assert len(hits) >= 1


def test_bad_sampling_is_a_config_error(corpus, tmp_path):
    with pytest.raises(ConfigError, match="data.sampling='shuffle'"):
        datamodule(corpus, tmp_path, sampling="shuffle")


def test_training_on_prepared_gpt2_shards(corpus, tmp_path, gpt2_ranks):
    overrides = [
        "data=text_files", f"data.source.paths=[{','.join(str(p) for p in corpus)}]",
        f"data.cache_dir={tmp_path / 'c'}",
        "data.val_fraction=0.1", "data.batch_size=4", "tokenizer=gpt2", f"tokenizer.ranks_file={gpt2_ranks}",
        "model.block_size=32", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "trainer.max_steps=4",
        "trainer.val_check_interval=2", "trainer.limit_val_batches=2", "trainer.accelerator=cpu",
        "callbacks.progress_bar=null", "logger=[]", f"paths.output_dir={tmp_path / 'run'}",
    ]
    cfg = compose_config(overrides)
    best = train(cfg)
    assert best is not None and np.isfinite(best) and best < np.log(50257) + 1
    assert (tmp_path / "c" / "gpt2" / "manifest.json").is_file()
    ckpt = torch.load(next((tmp_path / "run" / "checkpoints").glob("last*.ckpt")), weights_only=False)
    assert ckpt["state_dict"]["model.tok_emb.weight"].shape[0] == 50257  # vocab_size taken from the tokenizer


@pytest.mark.parametrize("store", ["prepared", "memory"])
def test_window_stores_resume_at_the_saved_batch(corpus, tmp_path, store):
    """A checkpoint's data position (epoch, batches trained) makes the next loader continue the epoch exactly."""
    first = datamodule(corpus, tmp_path, store=store)
    batches = [x for x, _ in first.train_dataloader()]
    progress = SimpleNamespace(processed=3)
    first.trainer = SimpleNamespace(global_rank=0, world_size=1, accumulate_grad_batches=1, fit_loop=SimpleNamespace(
        epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(current=progress))))
    saved = first.state_dict()
    assert saved == {"epoch": 0, "windows": 3 * 8, "epoch_windows": len(first.store.train_set),
                     "layout": {"world_size": 1, "batch_size": 8, "accumulate": 1},
                     "data": {"train_tokens": len(first.store.tokens["train"]), "sha256": ANY}}

    resumed = datamodule(corpus, tmp_path, store=store)
    resumed.load_state_dict(saved)
    rest = [x for x, _ in resumed.train_dataloader()]
    assert len(rest) == len(batches) - 3
    for a, b in zip(rest, batches[3:]):
        assert torch.equal(a, b)


def test_a_position_of_another_store_is_refused(corpus, tmp_path):
    """A streaming checkpoint cannot silently restart a window store from its first batch, nor the reverse."""
    with pytest.raises(ConfigError, match="data.store=streaming but this run has data.store=prepared"):
        datamodule(corpus, tmp_path).load_state_dict({"stream": {"world_size": 1, "num_workers": 0, "positions": {}}})
    stream = GPTDataModule(ByteTokenizer(), TextFiles([str(p) for p in corpus]), "streaming", block_size=BLOCK)
    with pytest.raises(ConfigError, match="data.store=memory or prepared but this run has data.store=streaming"):
        stream.load_state_dict({"epoch": 0, "batches": 3})
