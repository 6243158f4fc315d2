"""`train(cfg)`: compose the objects a Hydra config names, fit, and return the best val/loss."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from omegaconf import DictConfig, OmegaConf

from gptlab.apps.banner import banner_lines, vocab_warning
from gptlab.atomic import atomic_write_text, remove_stale_temp_files
from gptlab.checkpoint.atomic_io import AtomicCheckpointIO
from gptlab.checkpoint.reader import check_resumable, read_checkpoint
from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError, is_int
from gptlab.model import GPT
from gptlab.runs import sweep_failures, sweep_jobs
from gptlab.runs.resume import finished_run, resume_checkpoint, resume_mode, start_over
from gptlab.runs.run_dir import (
    FAILURE_FILE,
    RESOLVED_CONFIG,
    SUMMARY_FILE,
    Progress,
    discard_on_early_error,
)
from gptlab.runtime import (
    ladder_steps,  # noqa: F401  (registers the ladder's ${gptlab.ladder_steps:r} resolver)
    quiet,
)
from gptlab.runtime.continuation import expected_warnings_silenced
from gptlab.runtime.early_checks import Checked, check_before_run
from gptlab.runtime.hydra_ddp import ddp_job_scope
from gptlab.runtime.preemption import PreemptionCheckpoint
from gptlab.runtime.preflight import RETAINED_CHECKPOINTS, check_output_dirs, checkpoint_bytes
from gptlab.runtime.rank_watch import WATCH
from gptlab.signals import FLAG
from gptlab.train.callbacks.final_validation import FinalValidation
from gptlab.train.callbacks.training_clock import TrainingClock
from gptlab.train.module import GPTLitModule

log = logging.getLogger(__name__)
quiet.install()
# Lightning warns on every mid-epoch resume that the dataloader is not resumable; GPTDataModule restores
# the data position through its own state_dict, so the warning would be wrong here.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")


def instantiate_dict(group: DictConfig | None) -> dict[str, Any]:
    """Instantiate every entry of a config group that is a dict of `_target_` objects (callbacks, loggers);
    an entry set to null is switched off."""
    if not group:
        return {}
    return {name: hydra.utils.instantiate(node) for name, node in group.items()
            if node is not None and "_target_" in node}


def instantiate_loggers(group: DictConfig | None, run_name: str) -> list[Any]:
    """The loggers; a TensorBoard run gets a version (its subdir under <run dir>/tensorboard/) that TensorBoard's run
    list shows: a sweep job's differing overrides, so it says which job is which without the HParams tab, and a
    single run's name (cfg.name: train, or the experiment's), not a bare `tensorboard`."""
    name = sweep_jobs.sweep_job_name() or run_name
    loggers = []
    for node in (group or {}).values():
        if node is None or "_target_" not in node:
            continue
        named = name and node._target_.endswith("TensorBoardLogger") and node.get("version") == ""
        loggers.append(hydra.utils.instantiate(node, **({"version": name} if named else {})))
    return loggers


def save_resolved_config(cfg: DictConfig, output_dir: Path) -> None:
    """To its file always; to the console only with print_config=true (it is ~130 lines)."""
    text = OmegaConf.to_yaml(cfg, resolve=True)
    if cfg.get("print_config"):
        log.info("Resolved config:\n%s", text)
    atomic_write_text(output_dir / RESOLVED_CONFIG, text)


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


def gradient_accumulation(global_batch_tokens: int, micro_batch: int, block_size: int, devices: int, nodes: int) -> int:
    """How many micro-batches each device accumulates so one optimizer step sees `global_batch_tokens` tokens."""
    per_pass = micro_batch * block_size * devices * nodes
    valid = is_int(global_batch_tokens)
    if not valid or global_batch_tokens < per_pass or global_batch_tokens % per_pass:
        nearest = max(1, round(global_batch_tokens / per_pass)) * per_pass if valid else per_pass
        raise ConfigError(
            f"global_batch_tokens={global_batch_tokens!r} is not a positive multiple of micro-batch "
            f"{micro_batch} x block_size {block_size} x {devices} devices x {nodes} nodes = {per_pass} tokens; "
            f"use e.g. {nearest}, or change data.batch_size."
        )
    return global_batch_tokens // per_pass


def configure_batching(trainer: L.Trainer, global_batch_tokens: Optional[int], micro_batch: int,
                       block_size: int) -> int:
    """Sets the trainer's gradient accumulation from `global_batch_tokens` (when given) and counts
    val_check_interval in optimizer steps; returns the tokens per optimizer step."""
    if global_batch_tokens is not None:
        if trainer.accumulate_grad_batches != 1:
            raise ConfigError("set either global_batch_tokens or trainer.accumulate_grad_batches, not both.")
        trainer.accumulate_grad_batches = gradient_accumulation(
            global_batch_tokens, micro_batch, block_size, trainer.num_devices, trainer.num_nodes
        )
    if isinstance(trainer.val_check_interval, int):
        # Lightning counts it in micro-batches; gptlab's config means optimizer steps, like max_steps.
        trainer.val_check_interval *= trainer.accumulate_grad_batches
    return micro_batch * block_size * trainer.num_devices * trainer.num_nodes * trainer.accumulate_grad_batches


def train(cfg: DictConfig) -> Optional[float]:
    # From here a preemption signal is a flag that training acts on (callbacks/preemption.py).
    with FLAG.active(), ddp_job_scope():
        if sweep_jobs.in_sweep_job():
            return _sweep_job(cfg, Path(cfg.paths.output_dir))
        return _train(cfg)


def _sweep_job(cfg: DictConfig, output_dir: Path) -> Optional[float]:
    """One job of a `-m` sweep: refused if its dir holds another config's job, skipped if an earlier launch
    finished or failed it, and a failure of its own is recorded so that the sweep goes on (sweep_failures)."""
    sweep_jobs.check_same_sweep_job(cfg, output_dir)
    finished = sweep_jobs.finished_sweep_job(cfg, output_dir)
    if finished is not None:  # its files stay as they are; the sweeper still gets its value
        log.info("sweep job %s already finished (step %s, best val/loss %s); skipped", output_dir,
                 finished.get("global_step"), finished.get("best_val_loss"))
        return finished.get("best_val_loss")
    failed = sweep_failures.earlier_failure(output_dir)
    if failed is not None:
        log.warning("sweep job %s failed in an earlier launch (%s: %s); skipped (delete its %s to run it again)",
                    output_dir, failed.get("kind"), failed.get("reason"), FAILURE_FILE)
        return None
    return sweep_failures.run_recording_failure(lambda: _train(cfg), output_dir, sweep_jobs.sweep_job_name())


def _prepare(cfg: DictConfig, output_dir: Path, checked: Checked, ckpt_path: Optional[str]) -> tuple:
    """The objects of a run that passed its checks; rank 0 writes its setup files (config, banner)."""
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    torch.set_float32_matmul_precision(cfg.get("float32_matmul_precision", "high"))  # TF32 on GPUs
    tokenizer, model_cfg = checked.tokenizer, checked.model_cfg
    runtime = Runtime(**cfg.get("runtime", {}))  # how the model runs: compile, activation checkpointing
    warning = vocab_warning(model_cfg, cfg.model.get("vocab_size"), tokenizer)
    if warning:
        log.warning(warning)
    datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
    model = GPT(model_cfg)
    model.activation_checkpointing = runtime.activation_checkpointing
    module = GPTLitModule(
        model,
        optimizer=hydra.utils.instantiate(cfg.optimizer),
        scheduler=hydra.utils.instantiate(cfg.scheduler) if cfg.get("scheduler") else None,
        label_smoothing=cfg.label_smoothing,
        run_config=OmegaConf.to_container(cfg, resolve=True),
        nonfinite_check_every=cfg.get("nonfinite_check_every", 10),
        token_bytes=torch.from_numpy(tokenizer.token_byte_lengths()),  # for val/bpb
        compile=runtime.compile,  # the module compiles the forward that training and validation call
    )
    callbacks = [*instantiate_dict(cfg.get("callbacks")).values(), FinalValidation(), TrainingClock()]
    smoke_test = bool(cfg.trainer.get("fast_dev_run"))
    if smoke_test:  # debug=fast_dev_run writes nothing: no checkpoint of any kind, no run files (README)
        callbacks = [c for c in callbacks if not isinstance(c, (ModelCheckpoint, PreemptionCheckpoint))]
    loggers = instantiate_loggers(cfg.get("logger"), str(cfg.name))
    # callbacks.progress_bar=null means no bar, not Lightning's own default bar in its place.
    no_bar = {} if any(isinstance(c, ProgressBar) for c in callbacks) or "enable_progress_bar" in cfg.trainer \
        else {"enable_progress_bar": False}
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers,
                                                 plugins=[AtomicCheckpointIO()], **no_bar)

    tokens_per_step = configure_batching(trainer, cfg.global_batch_tokens, datamodule.batch_size, model_cfg.block_size)
    module.tokens_per_step = tokens_per_step  # for the progress bar's tokens/s

    if trainer.is_global_zero and not smoke_test:
        removed = start_over(cfg, output_dir)  # resume=restart: the earlier run's records go, named
        if removed:
            log.info("resume=restart: removed the earlier run's %s; training from step 0",
                     ", ".join(str(p.relative_to(output_dir)) for p in removed))
        checkpoint_dirs = sorted({Path(c.dirpath) for c in callbacks if isinstance(c, ModelCheckpoint) and c.dirpath}
                                 | {c.path.parent for c in callbacks if isinstance(c, PreemptionCheckpoint)})
        for leftover in remove_stale_temp_files([output_dir, *checkpoint_dirs]):
            log.info("removed %s, a temp file left by a run killed while writing it", leftover)
        # Checkpoints are written beside their final name (AtomicCheckpointIO), never in $TMPDIR: their dirs are
        # every place they pass through.
        check_output_dirs(output_dir, checkpoint_dirs, RETAINED_CHECKPOINTS * checkpoint_bytes(model.num_parameters()))
        save_resolved_config(cfg, output_dir)
        for line in banner_lines(cfg, model_cfg, model.num_parameters(), tokenizer, datamodule, trainer,
                                 tokens_per_step, output_dir):
            log.info(line)
    return ckpt_path, model, module, trainer, datamodule, callbacks, tokens_per_step


def _train(cfg: DictConfig) -> Optional[float]:
    output_dir = Path(cfg.paths.output_dir)
    # A user error before the first optimizer step (a check, the data, the first checkpoint dir) leaves the launch
    # and run dirs as they were: what this process created is removed again, and said.
    # A sweep job's dir stays whatever happens: its failure record goes there (sweep_failures).
    discard = contextlib.nullcontext(Progress()) if sweep_jobs.in_sweep_job() else discard_on_early_error(output_dir)
    with discard as progress:
        checked = check_before_run(cfg)  # the Hydra callback run_dir_guard ran them before the run dir existed
        ckpt_path = resume_checkpoint(cfg, output_dir)
        if ckpt_path is not None:
            check_resumable(ckpt_path, checked.model_cfg)
            if resume_mode(cfg) == "auto":
                log.info("resume=auto: continuing from %s", ckpt_path)
        finished = finished_run(cfg, output_dir, ckpt_path)
        if finished is not None:  # resume=auto on a finished run: it stays exactly as it was
            log.info("%s", finished.message(output_dir))
            return finished.best_val_loss
        ckpt_path, model, module, trainer, datamodule, callbacks, tokens_per_step = _prepare(
            cfg, output_dir, checked, ckpt_path)
        progress.started = lambda: trainer.global_step > 0

        started = time.perf_counter()
        # Lightning's SIGTERM handling would replace gptlab's flag with its own, which hangs DDP jobs (see
        # callbacks/preemption.py); the flag installed by train() stays in force for the whole fit.
        trainer._signal_connector.register_signal_handlers = lambda: None
        WATCH.start(trainer)  # the step a lost rank's message names (gptlab.runtime.rank_watch)
        # weights_only: a checkpoint is plain tensors and containers, so loading one runs no pickled code.
        checkpoint_dirs = [c.dirpath for c in callbacks if isinstance(c, ModelCheckpoint) and c.dirpath]
        with expected_warnings_silenced(ckpt_path, checkpoint_dirs):
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        fit_seconds = time.perf_counter() - started

    checkpoint = next((c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor == "val/loss"), None)
    final = trainer.callback_metrics.get("val/loss")
    final_bpb = trainer.callback_metrics.get("val/bpb")
    candidates = [checkpoint.best_model_score if checkpoint is not None else None, final, previous_best(ckpt_path)]
    candidates = [float(c) for c in candidates if c is not None]
    best = min(candidates) if candidates else None
    if trainer.is_global_zero and not trainer.fast_dev_run:
        clock = next(c for c in callbacks if isinstance(c, TrainingClock))
        summary = {
            "name": cfg.name,
            "parameters": model.num_parameters(),
            "best_val_loss": best,
            "final_val_loss": None if final is None else float(final),
            # val/bpb of the validation that reached best_val_loss (null if that was before this version logged it)
            "best_val_bpb": None if math.isnan(module.best_val_bpb) else module.best_val_bpb,
            "final_val_bpb": None if final_bpb is None else float(final_bpb),
            "global_step": trainer.global_step,
            "tokens_per_step": tokens_per_step,
            "tokens_seen": trainer.global_step * tokens_per_step,
            "fit_seconds": fit_seconds,
            "tokens_per_sec": clock.tokens_per_sec(trainer.global_step, tokens_per_step),  # see TrainingClock
        }
        atomic_write_text(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
    if best is not None and not trainer.fast_dev_run:
        log.info("Best val/loss %.4f; run dir %s", best, output_dir)
    return best
