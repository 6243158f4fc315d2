"""A progress bar counted in optimizer steps for the whole run, with loss, tokens/s and ETA.

Lightning's bar counts micro-batches of a pseudo-epoch and restarts every epoch, which says nothing about when
a run of max_steps ends. This bar spans `trainer.max_steps` (continuing from the resumed step), so tqdm's ETA is
the run's ETA. The loss is read (a device sync) only when the bar is redrawn. Its `val` is redrawn after every
validation, so the bar ends on the last one (the run's final val/loss), and it is closed (its line ended) when
training stops on an exception, so what gptlab prints then starts on a line of its own. Where stderr is not a
terminal (a log file, a scheduler's output, a fused sweep's members side by side), each redraw is one plain line
instead (_Lines), named by its sweep job: a bar's carriage returns and cursor moves would fill the log.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import lightning as L
from lightning.pytorch.callbacks import ProgressBar
from omegaconf import OmegaConf
from tqdm import tqdm

from gptlab.config.budget import SECONDS_STEP_CEILING
from gptlab.execution.fused import clock


class StepProgressBar(ProgressBar):
    """Subclasses ProgressBar so that Lightning does not add its own bar beside it."""

    def __init__(self, refresh_rate: int = 10) -> None:
        super().__init__()
        self.refresh_rate = refresh_rate
        self._bar: Optional[Any] = None  # a tqdm, or _Lines
        self._enabled = True
        self._last = (0, 0.0)  # (step, time) of the last redraw, for tokens/s
        self._postfix: dict[str, str] = {}

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not (self._enabled and trainer.is_global_zero) or self.refresh_rate == 0:
            return
        # a seconds budget ends the run, not a step count (gptlab.config.budget): no total, no ETA in steps
        total = trainer.max_steps if 0 < trainer.max_steps < SECONDS_STEP_CEILING else None
        if _is_terminal(sys.stderr):
            self._bar = tqdm(total=total, initial=trainer.global_step, unit="step", dynamic_ncols=True,
                             file=sys.stderr, desc="train", smoothing=0.1)
        else:
            self._bar = _Lines(total or -1, trainer.global_step, _job_label())
        self._last = (trainer.global_step, clock())

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *args: Any) -> None:
        bar = self._bar
        if bar is None or trainer.global_step == bar.n:
            return
        step = trainer.global_step
        if step % self.refresh_rate and step < trainer.max_steps:
            return
        now = clock()
        steps, seconds = step - self._last[0], now - self._last[1]
        tokens_per_step = getattr(pl_module, "tokens_per_step", None)
        postfix = self._postfix
        loss = outputs.get("train_loss") if isinstance(outputs, dict) else None
        if loss is not None:  # the micro-batch's cross-entropy, as train/loss: not the objective (z-loss, MTP terms)
            postfix["loss"] = f"{float(loss):.3f}"
        if tokens_per_step and seconds > 0:
            postfix["tok/s"] = f"{steps * tokens_per_step / seconds:,.0f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update(step - bar.n)
        self._last = (step, now)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        val = trainer.callback_metrics.get("val/loss")  # this validation's: Lightning updates it before this hook
        if self._bar is None or trainer.sanity_checking or val is None:
            return
        self._postfix["val"] = f"{float(val):.3f}"
        self._bar.set_postfix(self._postfix, refresh=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._bar is not None and trainer.global_step > self._bar.n:  # a stop between redraws (a seconds budget)
            self._bar.update(trainer.global_step - self._bar.n)
        self._close()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._close()  # a preemption or a NaN: gptlab's message then starts on its own line

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _job_label() -> str:
    """`job 3: ` in a `-m` sweep's job (whose lines may interleave with other jobs'), else empty."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return ""
    num = OmegaConf.select(HydraConfig.get(), "job.num", default=None)
    return "" if num is None else f"job {num}: "


class _Lines:
    """The bar as plain lines, one per redraw: the subset of tqdm StepProgressBar calls."""

    def __init__(self, total: int, initial: int, label: str) -> None:
        self.n, self.total, self.label = initial, total, label
        self._start, self._postfix = (initial, clock()), ""

    def set_postfix(self, postfix: dict[str, str], refresh: bool = True) -> None:
        self._postfix = ", ".join(f"{k}={v}" for k, v in postfix.items())
        if refresh:
            self._write()

    def update(self, steps: int) -> None:
        self.n += steps
        self._write()

    def close(self) -> None:
        pass

    def _write(self) -> None:
        steps, seconds = self.n - self._start[0], clock() - self._start[1]
        eta = _duration(seconds / steps * (self.total - self.n)) if steps > 0 and self.total > 0 else "?"
        done = f"{self.n}/{self.total}" if self.total > 0 else str(self.n)
        rest = f" | {self._postfix}" if self._postfix else ""
        # elapsed<remaining, as tqdm writes them
        print(f"{self.label}train: step {done}{rest} | {_duration(seconds)}<{eta}", file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
