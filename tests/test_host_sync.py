"""No host sync inside an accumulated step, none at all on a step that logs, checks, validates and saves nothing, and
none in a validation batch.

A 0.5M-token GPT-2 step is 16 micro-batches or more; a device read after each one idles the GPU 16 times a step (it
was Lightning's read of a prog_bar metric after every batch, and the NaN check's read on each micro-batch of the step
after a check). The run is the default one as users get it (progress bar, throughput, checkpoints, text samples,
probes), with accumulation; tests/host_reads.py says how reads are seen without a GPU.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import pytest
from helpers import TINY, compose_config
from host_reads import HostReads, Read, cuda_syncs

# Every periodic thing at its own period, so that most steps do none of them.
ACCUMULATE, MAX_STEPS = 4, 24
SCHEDULE = {"trainer.log_every_n_steps": 6, "nonfinite_check_every": 8, "trainer.val_check_interval": 12,
            "callbacks.progress_bar.refresh_rate": 10, "callbacks.periodic_checkpoint.every_n_train_steps": 9,
            "callbacks.stability_probes.every_n_steps": 7}


def run_with_reads(run_dir: Path, *overrides: str, gpu: bool = False) -> HostReads:
    import gptlab.apps.build as build
    from gptlab.apps.train import train

    reads = HostReads()
    tiny = [o for o in TINY if not o.startswith(("callbacks.progress_bar", "trainer.accelerator"))]
    cfg = compose_config([*tiny, f"trainer.accelerator={'gpu' if gpu else 'cpu'}", f"trainer.max_steps={MAX_STEPS}",
                          f"trainer.accumulate_grad_batches={ACCUMULATE}",
                          *(f"{k}={v}" for k, v in SCHEDULE.items()), *overrides], run_dir)
    original = build.build_callbacks
    build.build_callbacks = lambda c: [reads.callback(), *original(c)]
    try:
        with reads, cuda_syncs(reads) if gpu else contextlib.nullcontext():
            train(cfg)
    finally:
        build.build_callbacks = original
    return reads


# The probes run on the steps that start at a multiple of their period (global_step % N == 0); the others after the
# steps whose count of steps done is a multiple.
COUNTED_FROM_START = {"callbacks.stability_probes.every_n_steps"}


def busy_steps() -> set[int]:
    """The steps (0-based, as global_step when they start) on which something periodic may read the device:
    the first (the stability callback's initial-loss check), the last, and each period's."""
    return {s for s in range(MAX_STEPS) if s in (0, MAX_STEPS - 1) or any(
        (s if key in COUNTED_FROM_START else s + 1) % period == 0 for key, period in SCHEDULE.items())}


def describe(reads: list[Read]) -> str:
    counts = Counter((r.phase, r.step, r.micro_batch, r.call, r.where) for r in reads)
    return "\n".join(f"{phase} step {s} batch {m}: {call} x{n} at {where}"
                     for (phase, s, m, call, where), n in counts.items())


RUNS = [("cpu", ()), ("cpu", ("trainer=fsdp", "trainer.devices=1")), pytest.param("gpu", (), marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device, strategy", RUNS, ids=["cpu", "fsdp", "gpu"])
def test_no_host_read_inside_an_accumulated_step(tmp_path: Path, device: str, strategy: tuple[str, ...]) -> None:
    """On a GPU the run is the fast path as typed (compiled, bf16-mixed, fused AdamW), and torch's own sync
    report is added to what the TorchFunctionMode sees. Under FSDP (one gloo rank in this process) the same run
    goes through the sharded model, its clipping and its checkpoints."""
    reads = run_with_reads(tmp_path, *strategy, gpu=device == "gpu")
    assert len(reads.last_micro_batch) == MAX_STEPS
    assert set(reads.last_micro_batch.values()) == {ACCUMULATE - 1}
    first = 1 if device == "gpu" else 0  # on a GPU the first step compiles, and inductor's autotuning reads the device
    inside = [r for r in reads.training() if r.micro_batch != reads.last_micro_batch[r.step] and r.step >= first]
    assert not inside, "device reads before a step's last micro-batch:\n" + describe(inside)
    idle = [r for r in reads.training() if r.step not in busy_steps()]
    assert not idle, "device reads on steps that log, check, validate and save nothing:\n" + describe(idle)
    # The harness sees reads: the logging steps do read (the logger's scalars), so an empty list is no pass.
    assert {r.step for r in reads.training()} >= {5, 11, 23}
    validation = [r for r in reads.reads if r.phase == "validation"]
    assert not validation, "device reads in validation batches (the sums are read once, at the end):\n" + describe(
        validation)


@pytest.mark.parametrize("extra", [("loss_spike.z_threshold=6.0",)], ids=["loss_spike_guard"])
def test_per_step_guards_read_once_per_step_not_per_micro_batch(tmp_path: Path, extra: tuple[str, ...]) -> None:
    """A guard that must see every step's loss before the step is taken reads it once, on the step's last
    micro-batch."""
    reads = run_with_reads(tmp_path, *(f"callbacks.{o}" for o in extra))
    inside = [r for r in reads.training() if r.micro_batch != reads.last_micro_batch[r.step]]
    assert not inside, "device reads before a step's last micro-batch:\n" + describe(inside)


def test_train_loss_is_the_whole_steps_loss(tmp_path: Path) -> None:
    """train/loss and train/z_loss are read once per logging step, and each is the step's mean over all its
    micro-batches: a run that accumulates 2 micro-batches of 4 windows logs what one of 8 windows does (the same
    windows, the same gradient), not its last micro-batch's half."""
    from helpers import scalars, train_in_process

    logged = {}
    for name, overrides in {"accumulated": ("data.batch_size=4", "trainer.accumulate_grad_batches=2"),
                            "whole": ("data.batch_size=8", "trainer.accumulate_grad_batches=1")}.items():
        train_in_process(tmp_path / name, "trainer.max_steps=6", "trainer.val_check_interval=6", "model.dropout=0.0",
                         "model.z_loss=1e-3", *overrides)
        logged[name] = scalars(tmp_path / name)
    for tag in ("train/loss", "train/z_loss"):
        assert sorted(logged["accumulated"][tag]) == list(range(1, 7))
        for step, value in logged["whole"][tag].items():
            assert logged["accumulated"][tag][step] == pytest.approx(value, rel=1e-5), (tag, step)
