"""`train(cfg)`: the checks, the builds, the fit and the summary of one training run; returns the best val/loss
(for sweepers). Read `_train` for the whole path from a config to the first optimizer step."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import warnings
from pathlib import Path
from typing import Optional

from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig

from gptlab.apps.build import Run, build_run
from gptlab.apps.run_files import write_setup_files
from gptlab.atomic import atomic_write_text
from gptlab.checkpoint.reader import read_checkpoint
from gptlab.config import ladder_steps  # noqa: F401  (registers the ladder's ${gptlab.ladder_steps:r} resolver)
from gptlab.entry_signals import Terminated
from gptlab.execution.fused import clock
from gptlab.launch import quiet
from gptlab.launch.hydra_ddp import ddp_job_scope
from gptlab.launch.rank_watch import WATCH
from gptlab.model.accounting import built_parameters, held_parameters
from gptlab.preflight.early_checks import check_before_run
from gptlab.runs import sweep_failures, sweep_jobs
from gptlab.runs.continuation import expected_warnings_silenced
from gptlab.runs.resume import continuation
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE, Progress, discard_on_early_error
from gptlab.signals import FLAG
from gptlab.train.callbacks.final_validation import FinalValidation
from gptlab.train.callbacks.training_clock import TrainingClock
from gptlab.train.stages import tokens_trained

log = logging.getLogger(__name__)
quiet.install()
# Lightning warns on every mid-epoch resume that the dataloader is not resumable; GPTDataModule restores
# the data position through its own state_dict, so the warning would be wrong here.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")


def train(cfg: DictConfig) -> Optional[float]:
    # From here a preemption signal is a flag that training acts on (callbacks/preemption.py).
    with FLAG.active(), ddp_job_scope():
        FLAG.setting_up()  # until the fit: nothing to save, a signal stops at once (gptlab.signals)
        try:
            if sweep_jobs.in_sweep_job():
                return _sweep_job(cfg, Path(cfg.paths.output_dir))
            return _train(cfg)
        finally:
            FLAG.training()


def _sweep_job(cfg: DictConfig, output_dir: Path) -> Optional[float]:
    """One job of a `-m` sweep: refused if its dir holds another config's job, skipped if an earlier launch
    finished or failed it, and a failure of its own is recorded so that the sweep goes on (sweep_failures)."""
    sweep_jobs.check_same_sweep_job(cfg, output_dir)
    finished = sweep_jobs.finished_sweep_job(cfg, output_dir)
    if finished is not None:  # its files stay as they are; the sweeper still gets its value
        log.info("sweep job %s already finished (step %s, best val/loss %s); skipped", output_dir,
                 finished.get("global_step"), finished.get("best_val_loss"), extra={sweep_jobs.SWEEP_SKIP: True})
        return finished.get("best_val_loss")
    failed = sweep_failures.earlier_failure(output_dir)
    if failed is not None:
        log.warning("sweep job %s failed in an earlier launch (%s: %s); skipped (delete its %s to run it again)",
                    output_dir, failed.get("kind"), failed.get("reason"), FAILURE_FILE,
                    extra={sweep_jobs.SWEEP_SKIP: True})
        return None
    return sweep_failures.run_recording_failure(lambda: _train(cfg), output_dir, sweep_jobs.sweep_job_name())


def _train(cfg: DictConfig) -> Optional[float]:
    output_dir = Path(cfg.paths.output_dir)
    # A user error before the first optimizer step (a check, the data, the first checkpoint dir) leaves the launch
    # and run dirs as they were: what this process created is removed again, and said. A sweep job's dir stays
    # whatever happens: its failure record goes there (sweep_failures).
    discard = contextlib.nullcontext(Progress()) if sweep_jobs.in_sweep_job() else discard_on_early_error(output_dir)
    with discard as progress:
        checked = check_before_run(cfg)  # the Hydra callback run_dir_guard ran them before the run dir existed
        for line in checked.warnings:
            log.warning("%s", line)
        start = continuation(cfg, output_dir, checked.given, checked.model_cfg, checked.fsdp, bound=checked.bound)
        if start.mode == "auto" and start.ckpt_path is not None:
            log.info("resume=auto: continuing from %s", start.ckpt_path)
        if start.finished is not None:  # resume=auto on a finished run: it stays exactly as it was
            log.info("%s", start.finished.message(output_dir))
            return start.finished.best_val_loss
        run = build_run(cfg, checked, start.ckpt_path)
        write_setup_files(cfg, output_dir, checked, run, start.mode)
        progress.started = lambda: run.trainer.global_step > 0
        fit_seconds = _fit(run, output_dir)
    return _summarise(cfg, output_dir, run, fit_seconds)


class FitInterrupted(KeyboardInterrupt):
    """Ctrl-C during trainer.fit, which Lightning answers with its own sys.exit(1) and no word of how to go on
    (issue 46: the run ended with exit 1 and Lightning's "attempting graceful shutdown" alone). `words`: how to go on,
    as gptlab.launch.cli prints it."""

    def __init__(self, words: str) -> None:
        super().__init__(words)
        self.words = words


def _fit(run: Run, output_dir: Path) -> float:
    """trainer.fit, in seconds."""
    started = clock()
    WATCH.start(run.trainer)  # the step a lost rank's message names (gptlab.launch.rank_watch)
    checkpoint_dirs = [c.dirpath for c in run.callbacks if isinstance(c, ModelCheckpoint) and c.dirpath]
    with expected_warnings_silenced(run.ckpt_path, checkpoint_dirs):
        # weights_only: a checkpoint is plain tensors and containers, so loading one runs no pickled code.
        FLAG.training()
        try:
            run.trainer.fit(run.module, datamodule=run.datamodule, ckpt_path=run.ckpt_path, weights_only=True)
        except SystemExit as stop:
            if not run.trainer.interrupted or isinstance(stop, Terminated):  # SIGHUP: said, with its own exit code
                raise
            from gptlab.checkpoint.reader import checkpoints_newest_first
            from gptlab.launch.continuing import continue_words

            saved = output_dir.is_dir() and bool(checkpoints_newest_first(output_dir))
            then = continue_words(output_dir, saved) if saved or sweep_jobs.in_sweep_job() else \
                "No checkpoint was written yet: run the same command again to start over."
            raise FitInterrupted(f"at step {run.trainer.global_step}, without a save (Ctrl-C is not a preemption: "
                                 f"docs/preemption.md). {then}") from None
        final = next((c for c in run.callbacks if isinstance(c, FinalValidation)), None)
        if final is not None:
            final.run_cut_validation(run.trainer, run.module, run.datamodule)
    return clock() - started


def _summarise(cfg: DictConfig, output_dir: Path, run: Run, fit_seconds: float) -> Optional[float]:
    """The best val/loss of the whole run (a continued one included), written with what the run measured to
    run_summary.json by rank 0."""
    trainer = run.trainer
    checkpoint = next((c for c in run.callbacks if isinstance(c, ModelCheckpoint) and c.monitor == "val/loss"), None)
    final = trainer.callback_metrics.get("val/loss")
    final_bpb = trainer.callback_metrics.get("val/bpb")
    candidates = [checkpoint.best_model_score if checkpoint is not None else None, final, previous_best(run.ckpt_path)]
    candidates = [float(c) for c in candidates if c is not None]
    best = min(candidates) if candidates else None
    if trainer.is_global_zero and not trainer.fast_dev_run:
        clock = next(c for c in run.callbacks if isinstance(c, TrainingClock))
        total_steps = run.module.total_steps()

        def tokens_through(step: int) -> int:
            return tokens_trained(cfg, step, run.tokens_per_step, total_steps)

        summary = {
            "name": cfg.name,
            "parameters": built_parameters(run.model),  # as the banner and the report count them
            "best_val_loss": best,
            "final_val_loss": None if final is None else float(final),
            # val/bpb of the validation that reached best_val_loss (null if that was before this version logged it)
            "best_val_bpb": None if math.isnan(run.module.best_val_bpb) else run.module.best_val_bpb,
            "final_val_bpb": None if final_bpb is None else float(final_bpb),
            "global_step": trainer.global_step,
            "tokens_per_step": run.tokens_per_step,
            "tokens_seen": tokens_through(trainer.global_step),  # trained on: stages.batch_sizes skips rows
            "fit_seconds": fit_seconds,
            # in training steps, validation not counted (TrainingClock): what budget=seconds:N bounds
            "train_seconds": clock.earlier + clock.seconds,
            "tokens_per_sec": clock.tokens_per_sec(trainer.global_step, tokens_through),  # see TrainingClock
        }
        if bool(getattr(run.model, "head_untied", False)):  # model.untie_at reached: what the model holds now
            summary["parameters_after_untie"] = held_parameters(run.model)
        atomic_write_text(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
    if best is not None and not trainer.fast_dev_run and trainer.is_global_zero:  # one line for all ranks
        log.info("Best val/loss %.4f; run dir %s", best, output_dir)
    return best


def previous_best(ckpt_path: Optional[str]) -> Optional[float]:
    """The best val/loss a checkpoint's ModelCheckpoint had recorded, so a continued run (in a new run dir, where
    Lightning does not restore it) still reports the best of the whole run."""
    if ckpt_path is None:
        return None
    ckpt = read_checkpoint(ckpt_path, mmap=True)
    scores = [state.get("best_model_score") for key, state in ckpt.get("callbacks", {}).items()
              if "'monitor': 'val/loss'" in str(key) and isinstance(state, dict)]
    scores = [float(s) for s in scores if s is not None]
    return min(scores) if scores else None
