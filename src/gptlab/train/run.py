"""`train(cfg)`: compose the objects a Hydra config names, fit, and return the best val/loss."""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from omegaconf import DictConfig, OmegaConf

from gptlab.atomic import atomic_write_text, remove_stale_temp_files
from gptlab.config.check import check
from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError, is_int
from gptlab.model import GPT, GPTConfig
from gptlab.run_dir import RESOLVED_CONFIG, SUMMARY_FILE, discard_on_config_error
from gptlab.signals import FLAG
from gptlab.train import quiet, sweep_jobs
from gptlab.train.banner import banner_lines, vocab_warning
from gptlab.train.callbacks import PreemptionCheckpoint
from gptlab.train.callbacks.final_validation import FinalValidation
from gptlab.train.checkpoint_io import AtomicCheckpointIO
from gptlab.train.checkpoints import check_resumable, newest_loadable_checkpoint, read_checkpoint, resolve_checkpoint
from gptlab.train.guards import check_devices, check_memory
from gptlab.train.hydra_ddp import ddp_job_scope
from gptlab.train.module import GPTLitModule
from gptlab.train.preflight import check_output_dirs, checkpoint_bytes
from gptlab.train.rank_watch import WATCH

log = logging.getLogger(__name__)
quiet.install()
# Lightning warns on every mid-epoch resume that the dataloader is not resumable; GPTDataModule restores
# the data position through its own state_dict, so the warning would be wrong here.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
RETAINED_CHECKPOINTS = 4  # best, last, preempted and one in flight: what the disk check budgets for


def instantiate_dict(group: DictConfig | None) -> dict[str, Any]:
    """Instantiate every entry of a config group that is a dict of `_target_` objects (callbacks, loggers);
    an entry set to null is switched off."""
    if not group:
        return {}
    return {name: hydra.utils.instantiate(node) for name, node in group.items()
            if node is not None and "_target_" in node}


def build_model_config(model_cfg: Any, vocab_size: int) -> GPTConfig:
    """The preset, with vocab_size taken from the tokenizer when the preset leaves it null."""
    values = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) else model_cfg
    return GPTConfig.for_tokenizer(values, vocab_size)


def instantiate_loggers(group: DictConfig | None) -> list[Any]:
    """The loggers; a sweep job's TensorBoard run gets the job's differing overrides as its version (its subdir
    under <run dir>/tensorboard/), so TensorBoard's run list says which job is which without the HParams tab."""
    name = sweep_jobs.sweep_job_name()
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


def resume_checkpoint(cfg: DictConfig, output_dir: Path) -> Optional[str]:
    """`ckpt_path=<file>`, or with `resume=auto` the newest checkpoint in this run dir (None: start fresh). A
    sweep job behaves as resume=auto: a sweep launched again into its sweep dir continues its unfinished jobs."""
    ckpt_path, resume = cfg.get("ckpt_path"), cfg.get("resume")
    if resume is None and ckpt_path is None and sweep_jobs.in_sweep_job():
        resume = "auto"
    if resume not in (None, "auto"):
        raise ConfigError(f"resume={resume!r} is not a valid choice; use null or 'auto'.")
    if ckpt_path is not None and resume is not None:
        raise ConfigError("set either ckpt_path=<file> or resume=auto, not both.")
    if ckpt_path is not None:
        path = resolve_checkpoint(ckpt_path)
        if not path.is_file():
            raise ConfigError(f"ckpt_path={ckpt_path!r} is not a file; give a .ckpt written by a gptlab run.")
        return str(path)
    if resume == "auto":
        newest = newest_loadable_checkpoint(output_dir)
        if newest is not None:
            log.info("resume=auto: continuing from %s", newest)
            return str(newest)
        log.info("resume=auto: no readable checkpoint in %s yet; starting fresh", output_dir)
    return None


def train(cfg: DictConfig) -> Optional[float]:
    # From here a preemption signal is a flag that training acts on (callbacks/preemption.py).
    with FLAG.active(), ddp_job_scope():
        return _train(cfg)


def _prepare(cfg: DictConfig, output_dir: Path) -> tuple:
    """Every check, then the objects; a ConfigError from here leaves no run dir behind."""
    check(cfg)  # appended keys, ranges and cross-field rules (Hydra checked the types): before anything heavy
    launcher = int(os.environ.get("LOCAL_RANK", "0")) == 0  # ranks Lightning started itself were checked by rank 0
    if launcher:
        check_devices(cfg.trainer)  # before Lightning spawns a process per device
    ckpt_path = resume_checkpoint(cfg, output_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    torch.set_float32_matmul_precision(cfg.get("float32_matmul_precision", "high"))  # TF32 on GPUs

    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    runtime = Runtime(**cfg.get("runtime", {}))  # how the model runs: compile, activation checkpointing
    model_cfg = build_model_config(cfg.model, tokenizer.vocab_size)  # before anything slow: fail fast
    if launcher and cfg.get("check_memory", True):  # other ranks would see rank 0's memory already taken
        check_memory(model_cfg, cfg.data.batch_size, cfg.trainer,  # before the model's tensors are allocated
                     activation_checkpointing=runtime.activation_checkpointing)
    warning = vocab_warning(model_cfg, cfg.model.get("vocab_size"), tokenizer)
    if warning:
        log.warning(warning)
    if ckpt_path is not None:
        check_resumable(ckpt_path, model_cfg)
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
    callbacks = [*instantiate_dict(cfg.get("callbacks")).values(), FinalValidation()]
    smoke_test = bool(cfg.trainer.get("fast_dev_run"))
    if smoke_test:  # debug=fast_dev_run writes nothing: no checkpoint of any kind, no run files (README)
        callbacks = [c for c in callbacks if not isinstance(c, (ModelCheckpoint, PreemptionCheckpoint))]
    loggers = instantiate_loggers(cfg.get("logger"))
    # callbacks.progress_bar=null means no bar, not Lightning's own default bar in its place.
    no_bar = {} if any(isinstance(c, ProgressBar) for c in callbacks) or "enable_progress_bar" in cfg.trainer \
        else {"enable_progress_bar": False}
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers,
                                                 plugins=[AtomicCheckpointIO()], **no_bar)

    tokens_per_step = configure_batching(trainer, cfg.global_batch_tokens, datamodule.batch_size, model_cfg.block_size)
    module.tokens_per_step = tokens_per_step  # for the progress bar's tokens/s

    if trainer.is_global_zero and not smoke_test:
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
    if sweep_jobs.in_sweep_job():
        sweep_jobs.check_same_sweep_job(cfg, output_dir)
        finished = sweep_jobs.finished_sweep_job(cfg, output_dir)
        if finished is not None:  # its files stay as they are; the sweeper still gets its value
            log.info("sweep job %s already finished (step %s, best val/loss %s); skipped", output_dir,
                     finished.get("global_step"), finished.get("best_val_loss"))
            return finished.get("best_val_loss")
    with discard_on_config_error(output_dir, stop_at=Path(cfg.paths.log_dir)):
        ckpt_path, model, module, trainer, datamodule, callbacks, tokens_per_step = _prepare(cfg, output_dir)

    started = time.perf_counter()
    # Lightning's SIGTERM handling would replace gptlab's flag with its own, which hangs DDP jobs (see
    # callbacks/preemption.py); the flag installed by train() stays in force for the whole fit.
    trainer._signal_connector.register_signal_handlers = lambda: None
    WATCH.start(trainer)  # the step a lost rank's message names (gptlab.train.rank_watch)
    # weights_only: a checkpoint is plain tensors and containers, so loading one runs no pickled code.
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    fit_seconds = time.perf_counter() - started

    checkpoint = next((c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor == "val/loss"), None)
    final = trainer.callback_metrics.get("val/loss")
    final_bpb = trainer.callback_metrics.get("val/bpb")
    candidates = [checkpoint.best_model_score if checkpoint is not None else None, final, previous_best(ckpt_path)]
    candidates = [float(c) for c in candidates if c is not None]
    best = min(candidates) if candidates else None
    if trainer.is_global_zero and not trainer.fast_dev_run:
        throughput = trainer.callback_metrics.get("throughput/tokens_per_sec")  # the callback's windowed rate
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
            "tokens_per_sec": None if throughput is None else float(throughput),
        }
        atomic_write_text(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
    if best is not None and not trainer.fast_dev_run:
        log.info("Best val/loss %.4f; run dir %s", best, output_dir)
    return best
