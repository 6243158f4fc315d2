"""Preemption, a lost rank and a NaN on one rank, on real processes: exit codes, the one line that says how to
resume, SLURM requeue, and scripts/preemption_drill.py's 2-rank DDP jobs (a short version here; the README's full
drill, 10 SIGTERMs to each rank, is the slow test)."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    CHECKOUT_ENV,
    HANG_GUARD_S,
    ROOT,
    TINY,
    TRAIN_SCRIPT,
    drill_launch,
    load_checkpoint,
    run_python,
    scalars,
)

from gptlab.tools.preemption_drill import Case, drill_cases, outcome_row, run_preemption_drill

KILLER = ["+callbacks.killer._target_=helpers.KillAtStep", "+callbacks.killer.step=3"]


def _check_drill(cases: list[Case], tmp_path: Path) -> None:
    outcomes = run_preemption_drill(cases, seed=0, workdir=tmp_path, keep=True, launch=drill_launch)
    rows = "\n".join(outcome_row(o) for o in outcomes)
    assert all(o.passed for o in outcomes), rows
    assert len(outcomes) == len(cases)


def test_sigusr1_exits_138_requeues_under_slurm_and_its_resume_line_continues_the_run(tmp_path: Path) -> None:
    env, requeued = _fake_scontrol(tmp_path)
    run = tmp_path / "run"
    args = [*TINY, "trainer.max_steps=8", "callbacks.periodic_checkpoint.every_n_train_steps=100"]
    proc = run_python([sys.executable, str(TRAIN_SCRIPT), f"hydra.run.dir={run}", *args, *KILLER,
                       "+callbacks.killer.signal_name=SIGUSR1"], ROOT, env)
    assert proc.returncode == 128 + 10, proc.stderr[-2000:]  # 128 + SIGUSR1: "not finished" to schedulers
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gptlab:")]
    assert len(lines) == 1 and lines[0].startswith("gptlab: preempted (SIGUSR1 at step 4; saved "), lines
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 4  # it replaced last.ckpt
    assert requeued.read_text().split() == ["requeue", "4242"]

    command = shlex.split(lines[0].split("Continue with: ", 1)[1])  # as printed, typed by the user
    assert command[0] == "python" and command[1].endswith("train.py") and "resume=auto" in command
    resumed = run_python([sys.executable, *command[1:]], ROOT, CHECKOUT_ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "checkpoints/last.ckpt" in resumed.stderr + resumed.stdout  # resume=auto took the preemption checkpoint
    assert sorted(scalars(run)["train/loss"]) == list(range(1, 9))  # steps 1-4, then 5-8 after resuming


def test_single_device_sigterm_exits_143_with_one_line(tmp_path: Path) -> None:
    proc = run_python([sys.executable, str(TRAIN_SCRIPT), f"hydra.run.dir={tmp_path / 'run'}", *TINY,
                       "trainer.max_steps=8", *KILLER, "+callbacks.killer.signal_name=SIGTERM"], ROOT, CHECKOUT_ENV)
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("gptlab: preempted (SIGTERM at step 4;") == 1
    assert "Epoch 0" not in proc.stdout + proc.stderr  # callbacks.progress_bar=null: no bar, not Lightning's own
    assert "weights_only" not in proc.stdout + proc.stderr  # the preemption save asks for all state explicitly


def test_ddp_signals_at_aimed_moments_a_lost_rank_and_a_nan_on_one_rank(tmp_path: Path) -> None:
    """2 CPU ranks: SIGTERM to rank 0 mid-step and to rank 1 mid-validation, SIGUSR1 to both mid-checkpoint,
    SIGTERM to both and to rank 1 mid zero-shot evaluation (rank 0 alone scores, rank 1 waits; stopped at that step),
    SIGKILL of rank 1, NaN on rank 1. Each job ends within 60 s of its signal, with the documented exit code, one
    message, no traceback, every rank gone, and a last.ckpt that loads at the step the message names."""
    _check_drill([
        Case("preempt", "rank0", "step", "SIGTERM", 3),
        Case("preempt", "rank1", "validation", "SIGTERM", 4),
        Case("preempt", "all", "checkpoint", "SIGUSR1", 3),
        Case("preempt", "all", "zero_shot", "SIGTERM", 3),
        Case("preempt", "rank1", "zero_shot", "SIGTERM", 3),
        Case("lost", "rank1", "step", "SIGKILL", 3),
        Case("nan", step=3),
    ], tmp_path)


def _fake_scontrol(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `scontrol` records how gptlab called it, as SLURM's would requeue the job."""
    bin_dir, requeued = tmp_path / "bin", tmp_path / "requeued"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" > {requeued}\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    return {**CHECKOUT_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}, requeued


@pytest.mark.parametrize("rank, signal_name", [(1, "SIGTERM"), (0, "SIGUSR1")])
def test_a_signal_to_one_rank_before_training_stops_every_rank_together(tmp_path: Path, rank: int,
                                                                         signal_name: str) -> None:
    """2 CPU ranks, one signalled before its data is set up: every rank stops there (nothing to save), with the
    signal's exit code and one line, where that rank alone used to stop and the other lose contact (exit 1 when
    rank 1 was the one). SIGUSR1 also requeues under SLURM, as a preemption during training does."""
    env, requeued = _fake_scontrol(tmp_path)
    run = tmp_path / "run"
    proc = run_python([sys.executable, str(TRAIN_SCRIPT), f"hydra.run.dir={run}", *TINY, "trainer=ddp",
                       "trainer.max_steps=8", "+callbacks.sig._target_=helpers.SignalAtStart",
                       f"+callbacks.sig.rank={rank}", f"+callbacks.sig.signal_name={signal_name}"],
                      ROOT, {**env, "OMP_NUM_THREADS": "1"})
    signum = {"SIGTERM": 15, "SIGUSR1": 10}[signal_name]
    assert proc.returncode == 128 + signum, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gptlab:")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"gptlab: stopped: {signal_name} while ") and "before training started" in lines[0]
    assert not list(run.glob("checkpoints/*.ckpt"))
    assert requeued.exists() == (signal_name == "SIGUSR1")


def test_a_signal_to_a_rank_still_starting_is_recorded_not_its_death(tmp_path: Path) -> None:
    """DDP ranks > 0 start with the preemption signals blocked (rank 0 holds them while it starts them) until
    src/train.py's first act, installing the handler: a signal that reaches a rank while Python starts is then its
    recorded preemption, not a death that the rank watcher must call a lost rank."""
    from gptlab.signals import FLAG

    def child(sleep: float) -> list[str]:  # a rank that takes `sleep` s to start, then installs the handler
        return [sys.executable, "-c", f"import time; time.sleep({sleep}); from gptlab.signals import FLAG; "
                "FLAG.install(); print(FLAG.signum)"]

    FLAG.hold_for_children()
    try:
        proc = subprocess.Popen(child(1.0), env=CHECKOUT_ENV, stdout=subprocess.PIPE, text=True)
    finally:
        FLAG.release()
    proc.send_signal(15)  # before its handler exists (held from its birth: whenever it arrives, it waits)
    out, _ = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and out.split() == ["15"], (proc.returncode, out)
    unheld = subprocess.Popen(child(HANG_GUARD_S), env=CHECKOUT_ENV, stdout=subprocess.PIPE, text=True)
    unheld.send_signal(15)
    unheld.communicate(timeout=HANG_GUARD_S)
    assert unheld.returncode == -15  # what the hold prevents


@pytest.mark.slow
def test_full_preemption_drill(tmp_path: Path) -> None:
    """The README's drill: 10 SIGTERMs to rank 0 and 10 to rank 1 across every moment (random times from the
    launch on included), SIGUSR1 to all ranks at each moment, a lost rank and a NaN on one rank."""
    _check_drill(drill_cases(repeats=10, seed=0), tmp_path)
