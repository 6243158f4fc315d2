"""The data position is global (epoch, windows of the epoch's order trained on): a resume may split the same global
batch into other ranks x micro-batch x accumulation and continues at the same window, a resume with another global
batch is refused naming the fields to set, and checkpoints saved in the older per-rank form are converted."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import ANY

import numpy as np
import pytest
import torch
from helpers import load_checkpoint, scalars, train_in_process

from gptlab.data import ByteTokenizer, GPTDataModule
from gptlab.data.mixture import Mixture
from gptlab.data.sources import BuiltinSource
from gptlab.data.windows import EpochWindows
from gptlab.errors import ConfigError
from gptlab.runs.relayout import relayout_loops


def trainer(world_size: int, accumulate: int = 1, processed: int = 3, rank: int = 0) -> SimpleNamespace:
    progress = SimpleNamespace(processed=processed)
    return SimpleNamespace(global_rank=rank, world_size=world_size, accumulate_grad_batches=accumulate,
                           fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(
                               batch_progress=SimpleNamespace(current=progress))))


def pydocs(batch_size: int = 4, sampling: str = "random", mixture: bool = False) -> GPTDataModule:
    source = BuiltinSource("pydocs")
    if mixture:
        source = Mixture({"a": {"source": source, "weight": 3}, "b": {"source": BuiltinSource("pydocs"), "weight": 1}})
    dm = GPTDataModule(ByteTokenizer(), source, store="memory", block_size=32, batch_size=batch_size,
                       val_fraction=0.05, sampling=sampling, samples_per_epoch=101 if sampling == "random" else None)
    dm.setup()
    return dm


def remaining(state: dict, world: int, batch: int, accumulate: int, **kwargs: object) -> list[int]:
    """The global indices a run resumed from `state` on this layout trains on for the rest of the epoch, in the
    order of the epoch (micro-batch by micro-batch, rank by rank)."""
    samplers = []
    for rank in range(world):
        dm = pydocs(batch, **kwargs)  # type: ignore[arg-type]
        dm.load_state_dict(state)
        dm.trainer = trainer(world, accumulate, rank=rank)
        samplers.append(list(dm.train_dataloader().sampler))
    return [int(i) for row in zip(*samplers, strict=True) for i in row]


@pytest.fixture(scope="module")
def saved_on_two_ranks() -> dict:
    dm = pydocs()
    dm.trainer = trainer(world_size=2)
    dm.train_dataloader()
    return dm.state_dict()


def test_the_position_is_saved_as_global_windows(saved_on_two_ranks: dict) -> None:
    assert saved_on_two_ranks == {"epoch": 0, "windows": 3 * 4 * 2, "epoch_windows": 101,
                                  "layout": {"world_size": 2, "batch_size": 4, "accumulate": 1}, "data": ANY}


@pytest.mark.parametrize("world,batch,accumulate", [(2, 4, 1), (1, 8, 1), (1, 4, 2), (4, 2, 1), (8, 1, 1), (2, 2, 2)])
def test_another_split_of_the_global_batch_continues_at_the_same_window(saved_on_two_ranks: dict, world: int,
                                                                       batch: int, accumulate: int) -> None:
    # 101 windows per epoch, 8 per step: the epoch uses 96 (12 whole steps) on every layout; 24 were trained on.
    assert remaining(saved_on_two_ranks, world, batch, accumulate) == list(range(24, 96))


@pytest.mark.parametrize("world,batch,accumulate,now", [
    (1, 4, 1, "1 rank(s) x data.batch_size=4 x 1 accumulated = 4 windows per step"),  # 2 -> 1 ranks, G halved
    (4, 4, 1, "4 rank(s) x data.batch_size=4 x 1 accumulated = 16 windows per step"),  # 2 -> 4 ranks, G doubled
    (2, 8, 1, "2 rank(s) x data.batch_size=8 x 1 accumulated = 16 windows per step"),  # another micro-batch
    (2, 4, 2, "2 rank(s) x data.batch_size=4 x 2 accumulated = 16 windows per step"),  # another accumulation
])
def test_another_global_batch_is_refused(saved_on_two_ranks: dict, world: int, batch: int, accumulate: int,
                                         now: str) -> None:
    resumed = pydocs(batch)
    resumed.load_state_dict(saved_on_two_ranks)
    resumed.trainer = trainer(world, accumulate)
    with pytest.raises(ConfigError) as err:
        resumed.train_dataloader()
    assert str(err.value).startswith(
        "the checkpoint was trained with 2 rank(s) x data.batch_size=4 x 1 accumulated = 8 windows per step, but "
        f"this run has {now}. A resumed run may change the number of ranks (trainer.devices, trainer.num_nodes), "
        "data.batch_size and the accumulation, but not the global batch: set global_batch_tokens (or "
        "trainer.accumulate_grad_batches) so that ranks x data.batch_size x accumulated = 8 windows, as the "
        "interrupted run had: e.g. data.batch_size=")
    # Issue 46 case: the words alone sent data.batch_size=8 to a global_batch_tokens that is refused; the settings
    # named, typed on these ranks, continue the run.
    import re

    size, steps = map(int, re.search(r"e\.g\. data\.batch_size=(\d+) trainer\.accumulate_grad_batches=(\d+) "
                                     r"\(without global_batch_tokens\)\.$", str(err.value)).groups())
    assert size <= batch
    typed = pydocs(size)
    typed.load_state_dict(saved_on_two_ranks)
    typed.trainer = trainer(world, steps)
    typed.train_dataloader()


def test_a_checkpoint_inside_a_step_continues_only_on_a_split_that_can() -> None:
    dm = pydocs()
    dm.trainer = trainer(world_size=1, accumulate=2, processed=1)  # one of the step's two micro-batches done
    dm.train_dataloader()
    inside = dm.state_dict()
    assert remaining(inside, 1, 4, 2) == list(range(4, 96))
    with pytest.raises(ConfigError, match=r"stopped 4 windows into its epoch, inside an optimizer step, which 2 "
                                          r"rank\(s\) x data.batch_size=4 x 1 accumulated = 8 windows per step "
                                          r"cannot continue \(8 windows per micro-batch on all ranks\)"):
        remaining(inside, 2, 4, 1)


def test_older_checkpoints_are_converted() -> None:
    # Saved before the layout was: taken as this run's (2 ranks x 4), 3 micro-batches each.
    assert remaining({"epoch": 0, "batches": 3}, 2, 4, 1) == list(range(24, 96))
    # Saved with its layout, per-rank micro-batches: moves to one rank like a global position.
    old = {"epoch": 1, "batches": 3, "layout": {"world_size": 2, "batch_size": 4, "accumulate": 1}}
    assert remaining(old, 1, 8, 1) == list(range(101 + 24, 101 + 96))
    # An epoch-ordered store trimmed its epoch to a multiple of the ranks: that length, and the order it shuffles,
    # stay the run's.
    dm = pydocs(sampling="epoch")
    n = len(dm.store.train_set)
    world = next(w for w in range(2, 10) if n % w)
    old = {"epoch": 0, "batches": 1, "layout": {"world_size": world, "batch_size": 4, "accumulate": 1}}
    resumed = pydocs(4 * world, sampling="epoch")  # another split: one rank, the whole step as one micro-batch
    resumed.load_state_dict({**old, "layout": {**old["layout"]}})
    resumed.trainer = trainer(world_size=1)
    resumed.train_dataloader()
    trimmed = n - n % world
    assert len(resumed.store.train_set) == trimmed
    assert resumed.state_dict()["epoch_windows"] == trimmed
    legacy = EpochWindows(resumed.store.tokens["train"], 32, 0, n_windows=trimmed)
    assert [resumed.store.train_set.window_start(i) for i in range(5)] == [legacy.window_start(i) for i in range(5)]


def test_a_mixture_moves_to_another_layout_with_every_source_where_it_stopped() -> None:
    dm = pydocs(mixture=True)
    dm.trainer = trainer(world_size=2, processed=5)
    dm.train_dataloader()
    saved = dm.state_dict()
    assert saved["windows"] == 40 and sum(saved["mixture"]["windows"].values()) == 40
    resumed = pydocs(8, mixture=True)
    resumed.load_state_dict(saved)
    resumed.trainer = trainer(world_size=1, processed=5)
    loader = resumed.train_dataloader()
    assert list(loader.sampler)[:3] == [40, 41, 42]
    assert resumed.windows_seen() == saved["mixture"]["windows"]  # 5 micro-batches of 8 on one rank: the same 40


def test_lightning_counters_move_to_the_new_split() -> None:
    """2 ranks x 4 windows -> 1 rank x 2 windows: 4 times the micro-batches. A checkpoint saved in
    on_train_batch_end has `completed` one behind `processed`; the gap stays 1, as Lightning's restart expects."""
    dm = pydocs(batch_size=2)
    counts = {"ready": 3, "started": 3, "processed": 3, "completed": 2}
    progress = {"current": dict(counts), "total": dict(counts)}
    checkpoint = {"GPTDataModule": {"layout": {"world_size": 2, "batch_size": 4, "accumulate": 1}},
                  "loops": {"fit_loop": {"epoch_loop.batch_progress": progress}}}
    relayout_loops(checkpoint, SimpleNamespace(datamodule=dm, world_size=1, accumulate_grad_batches=4))
    moved = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert moved["current"] == moved["total"] == {"ready": 12, "started": 12, "processed": 12, "completed": 11}
    del checkpoint["loops"]
    with pytest.raises(ConfigError, match="no Lightning batch counters"):
        relayout_loops(checkpoint, SimpleNamespace(datamodule=dm, world_size=1, accumulate_grad_batches=4))


@pytest.fixture(scope="module")
def one_rank_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("reference")
    train_in_process(run, *RELAYOUT_RUN, "trainer.max_steps=4")
    return run


# Dropout 0: the runs below differ only in how each step's 4 windows are cut into micro-batches.
RELAYOUT_RUN = ["model.dropout=0.0", "trainer.val_check_interval=2", "callbacks.text_samples=null"]


def test_a_real_resume_with_another_micro_batch_continues_the_run(one_rank_reference: Path, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """4 windows per step as 1 micro-batch of 4, then as 2 accumulated micro-batches of 2: Lightning's batch
    counters are converted, the steps see the same windows and the weights end where the uninterrupted run's do."""
    run = tmp_path / "run"
    train_in_process(run, *RELAYOUT_RUN, "trainer.max_steps=2")
    last = run / "checkpoints" / "last.ckpt"
    assert load_checkpoint(last)["GPTDataModule"]["layout"] == {"world_size": 1, "batch_size": 4, "accumulate": 1}
    caplog.set_level(logging.INFO, logger="gptlab.data.position")
    train_in_process(run, *RELAYOUT_RUN, "trainer.max_steps=4", "data.batch_size=2", "global_batch_tokens=128",
                     "trainer.limit_val_batches=4", f"ckpt_path={last}")  # the same 8 validation windows as 2 x 4
    assert ("Continuing on 1 rank(s) x data.batch_size=2 x 2 accumulated = 4 windows per step (the checkpoint had "
            "1 rank(s) x data.batch_size=4 x 1 accumulated = 4 windows per step): the data continues at window 8 of "
            "epoch 0, in the same global order.") in caplog.text
    state, reference = load_checkpoint(last), load_checkpoint(one_rank_reference / "checkpoints" / "last.ckpt")
    assert state["global_step"] == 4
    assert state["GPTDataModule"] == {"epoch": 0, "windows": 16, "epoch_windows": reference["GPTDataModule"][
        "epoch_windows"], "layout": {"world_size": 1, "batch_size": 2, "accumulate": 2}, "data": ANY}
    assert state["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"] == 4 + 4
    for name, value in reference["state_dict"].items():
        torch.testing.assert_close(state["state_dict"][name], value, rtol=1e-4, atol=1e-6, msg=name)
    ours, theirs = scalars(run)["val/loss"], scalars(one_rank_reference)["val/loss"]
    assert np.isclose(ours[max(ours)], theirs[max(theirs)], rtol=1e-5)  # the last validation, after step 4


def test_a_real_resume_with_another_global_batch_is_refused(one_rank_reference: Path) -> None:
    last = one_rank_reference / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"1 rank\(s\) x data.batch_size=4 x 1 accumulated = 4 windows per step, "
                                          r"but this run has 1 rank\(s\) x data.batch_size=2 x 4 accumulated"):
        train_in_process(one_rank_reference.parent / "other", *RELAYOUT_RUN, "trainer.max_steps=6",
                         "data.batch_size=2", "global_batch_tokens=256", f"ckpt_path={last}")
