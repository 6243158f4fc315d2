"""Shared by the tests/test_training_*.py files: tiny runs of src/train.py in subprocesses, fault-injecting
callbacks (named by `+callbacks.x._target_=training_support.X`, so tests/ goes on PYTHONPATH), and a reader
for TensorBoard event files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from conftest import CHECKOUT_ENV, ROOT, compose_config
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TESTS = Path(__file__).resolve().parent

# A model and run small enough that one subprocess run takes a few seconds on a shared CPU.
TINY = [
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "model.block_size=32",
    "data.batch_size=4",
    "trainer.accelerator=cpu",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=2",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
    "callbacks.throughput.window_size=2",
    "callbacks.text_samples.max_new_tokens=8",
]


def run_script(script: str, overrides: list[str], check: bool = True) -> subprocess.CompletedProcess:
    env = {**CHECKOUT_ENV, "PYTHONPATH": os.pathsep.join([str(TESTS), CHECKOUT_ENV["PYTHONPATH"]])}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / script), *overrides], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def run_train(run_dir: Path, *overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_script("train.py", [f"hydra.run.dir={run_dir}", *TINY, *overrides], check=check)


def compose_train(run_dir: Path, *overrides: str) -> DictConfig:
    """The config `python src/train.py` would see for a tiny run, with the run dir set directly."""
    return compose_config([*TINY, *overrides], run_dir)


def train_in_process(run_dir: Path, *overrides: str) -> float | None:
    """A run without the subprocess's ~10 s of imports; for the runs that need no signal."""
    from gptlab.train.run import train

    return train(compose_train(run_dir, *overrides))


def scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} over every event file of the run, later files (a resumed run) winning."""
    out: dict[str, dict[int, float]] = {}
    for path in sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns):
        acc = EventAccumulator(str(path))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


class KillAtStep(L.Callback):
    """Sends this process `signal_name` as optimizer step `step` begins, i.e. while that step is computed."""

    def __init__(self, step: int, signal_name: str = "SIGKILL") -> None:
        self.step, self.signum = step, getattr(signal, signal_name)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class InjectNaN(L.Callback):
    """Turns one weight into NaN just before the batch of optimizer step `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.tok_emb.weight[0, 0] = float("nan")
