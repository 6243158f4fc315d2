"""A run checkpointed on 2 ranks continues on 1, and one checkpointed on 1 continues on 2 (DDP, gloo on CPU), with
the global order of training windows unchanged: every optimizer step trains on the same windows as the
uninterrupted 1-rank run's, so every window is seen as often, and the weights and val/loss continue within float
tolerance (the gradient is averaged in another order; dropout is 0 since each rank draws its own masks).

Same config on both layouts: data.batch_size=2 and global_batch_tokens=128 (4 windows of 32 tokens per step), so
1 rank accumulates 2 micro-batches and 2 ranks take 1 each."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import load_checkpoint, run_tiny, scalars, train_in_process

RUN = ["model.dropout=0.0", "data.batch_size=2", "global_batch_tokens=128", "trainer.val_check_interval=2",
       "callbacks.text_samples=null", "+callbacks.record._target_=helpers.RecordBatches",
       "+callbacks.record.per_rank=true"]
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


def record(run: Path) -> str:
    return f"+callbacks.record.path={run / 'batches.pt'}"


def on_two_ranks(run: Path, *overrides: str) -> None:
    proc = run_tiny(run, *RUN, *DDP, record(run), *overrides, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run / "two_ranks_console.txt").write_text(proc.stdout + proc.stderr)  # what the user saw


def on_one_rank(run: Path, *overrides: str) -> None:
    train_in_process(run, *RUN, record(run), *overrides)


def windows_per_step(run: Path) -> dict[int, Counter]:
    """Optimizer step -> the windows (token rows) it trained on, over all ranks and micro-batches, with multiplicity."""
    steps: dict[int, Counter] = {}
    for path in sorted(run.glob("batches.pt.rank*")):
        for step, batches in torch.load(path).items():
            steps.setdefault(step, Counter()).update(tuple(row) for x in batches for row in x.tolist())
    return steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted")
    on_one_rank(run, "trainer.max_steps=4")
    return run


def resumed(tmp_path_factory: pytest.TempPathFactory, first_on_two: bool) -> Path:
    """2 steps on one layout, then to step 4 on the other, from the first leg's last checkpoint."""
    run = tmp_path_factory.mktemp("two_then_one" if first_on_two else "one_then_two")
    first, second = (on_two_ranks, on_one_rank) if first_on_two else (on_one_rank, on_two_ranks)
    first(run, "trainer.max_steps=2")
    second(run, "trainer.max_steps=4", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    return run


@pytest.fixture(scope="module")
def two_then_one(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resumed(tmp_path_factory, first_on_two=True)


@pytest.fixture(scope="module")
def one_then_two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resumed(tmp_path_factory, first_on_two=False)


def check_continues(run: Path, reference: Path) -> None:
    ours, theirs = windows_per_step(run), windows_per_step(reference)
    assert sorted(ours) == sorted(theirs) == [0, 1, 2, 3]
    for step in theirs:
        assert sum(theirs[step].values()) == 4
        assert ours[step] == theirs[step], f"step {step} trained on other windows"
    state, uninterrupted = load_checkpoint(run / "checkpoints" / "last.ckpt"), load_checkpoint(
        reference / "checkpoints" / "last.ckpt")
    assert state["global_step"] == 4
    assert state["GPTDataModule"]["windows"] == uninterrupted["GPTDataModule"]["windows"] == 16
    for name, value in uninterrupted["state_dict"].items():
        torch.testing.assert_close(state["state_dict"][name], value, rtol=1e-4, atol=1e-6, msg=name)
    val, val_reference = scalars(run)["val/loss"], scalars(reference)["val/loss"]
    assert val[max(val)] == pytest.approx(val_reference[max(val_reference)], rel=1e-5)  # after step 4


def test_two_ranks_continue_on_one(two_then_one: Path, reference: Path) -> None:
    assert sorted(p.name for p in two_then_one.glob("batches.pt.rank*")) == ["batches.pt.rank0", "batches.pt.rank1"]
    check_continues(two_then_one, reference)
    assert load_checkpoint(two_then_one / "checkpoints" / "last.ckpt")["GPTDataModule"]["layout"] == {
        "world_size": 1, "batch_size": 2, "accumulate": 2}


@pytest.mark.slow
def test_one_rank_continues_on_two(one_then_two: Path, reference: Path) -> None:
    check_continues(one_then_two, reference)
    assert load_checkpoint(one_then_two / "checkpoints" / "last.ckpt")["GPTDataModule"]["layout"] == {
        "world_size": 2, "batch_size": 2, "accumulate": 1}


def test_two_ranks_print_each_line_once(two_then_one: Path) -> None:
    """Under 2-rank DDP, "Best val/loss" and third-party deprecation warnings used to print once per rank."""
    console = (two_then_one / "two_ranks_console.txt").read_text()
    assert console.count("Best val/loss") == 1, console[-3000:]
    deprecations = [line for line in console.splitlines() if "deprecat" in line.lower()]
    assert len(deprecations) == len(set(deprecations)), deprecations
