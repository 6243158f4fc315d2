"""A resume whose batch layout (ranks x micro-batch x accumulation) differs from the checkpoint's is refused with
the fields to set, instead of continuing the data at a sample the saved position does not mean."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import load_checkpoint, train_in_process

from gptlab.data import ByteTokenizer, GPTDataModule
from gptlab.data.sources import BuiltinSource
from gptlab.errors import ConfigError


def trainer(world_size: int, accumulate: int = 1, processed: int = 3) -> SimpleNamespace:
    progress = SimpleNamespace(processed=processed)
    return SimpleNamespace(global_rank=0, world_size=world_size, accumulate_grad_batches=accumulate,
                           fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(
                               batch_progress=SimpleNamespace(current=progress))))


def pydocs(batch_size: int = 4) -> GPTDataModule:
    dm = GPTDataModule(ByteTokenizer(), BuiltinSource("pydocs"), store="memory", block_size=32, batch_size=batch_size,
                       val_fraction=0.05)
    dm.setup()
    return dm


@pytest.fixture(scope="module")
def saved_on_two_ranks() -> dict:
    dm = pydocs()
    dm.trainer = trainer(world_size=2)
    dm.train_dataloader()
    return dm.state_dict()


@pytest.mark.parametrize("world,batch,accumulate,now", [
    (1, 4, 1, "1 rank(s) x data.batch_size=4 x 1 accumulated = 4 windows per step"),  # 2 -> 1 ranks
    (4, 4, 1, "4 rank(s) x data.batch_size=4 x 1 accumulated = 16 windows per step"),  # 2 -> 4 ranks
    (2, 8, 1, "2 rank(s) x data.batch_size=8 x 1 accumulated = 16 windows per step"),  # another micro-batch
    (2, 4, 2, "2 rank(s) x data.batch_size=4 x 2 accumulated = 16 windows per step"),  # another global batch
])
def test_another_layout_is_refused(saved_on_two_ranks: dict, world: int, batch: int, accumulate: int,
                                   now: str) -> None:
    assert saved_on_two_ranks["layout"] == {"world_size": 2, "batch_size": 4, "accumulate": 1}
    resumed = pydocs(batch)
    resumed.load_state_dict(saved_on_two_ranks)
    resumed.trainer = trainer(world, accumulate)
    with pytest.raises(ConfigError) as err:
        resumed.train_dataloader()
    assert str(err.value).startswith(
        "the checkpoint was trained with 2 rank(s) x data.batch_size=4 x 1 accumulated = 8 windows per step, but "
        f"this run has {now}. gptlab resumes the exact data order only with the same layout: set trainer.devices")


def test_same_layout_and_old_checkpoints_resume(saved_on_two_ranks: dict) -> None:
    for state in (saved_on_two_ranks, {"epoch": 0, "batches": 3}):  # the second: saved before layouts were
        resumed = pydocs()
        resumed.load_state_dict(state)
        resumed.trainer = trainer(world_size=2)
        assert resumed.train_dataloader().sampler.start == 3 * 4


def test_a_real_resume_with_another_micro_batch_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train_in_process(run, "trainer.max_steps=2", "trainer.val_check_interval=2")
    last = run / "checkpoints" / "last.ckpt"
    assert load_checkpoint(last)["GPTDataModule"]["layout"] == {"world_size": 1, "batch_size": 4, "accumulate": 1}
    with pytest.raises(ConfigError, match=r"1 rank\(s\) x data.batch_size=4 x 1 accumulated = 4 windows per step, "
                                          r"but this run has 1 rank\(s\) x data.batch_size=2 x 2 accumulated"):
        train_in_process(run, "trainer.max_steps=4", "trainer.val_check_interval=2", "data.batch_size=2",
                         "global_batch_tokens=128", f"ckpt_path={last}")
