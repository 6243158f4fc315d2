"""The objects of a training run, built from a config that passed every check (runtime.early_checks): one
function per object, and `build_run` lists them in the order they depend on each other."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import hydra
import lightning as L
import torch
from hydra.errors import InstantiationException
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from omegaconf import DictConfig, OmegaConf

from gptlab import lightning_internals
from gptlab.apps.seeds import run_seed
from gptlab.checkpoint.atomic_io import AtomicCheckpointIO
from gptlab.config import budget
from gptlab.config.schemas import Runtime, Stages
from gptlab.errors import ConfigError, find_config_error, is_int
from gptlab.execution import threads as cpu_threads
from gptlab.launch.hydra_ddp import job_subprocess_cmd
from gptlab.launch.rank_watch import watch_ranks
from gptlab.model import GPT
from gptlab.preflight.early_checks import Checked
from gptlab.runs import sweep_jobs
from gptlab.train.callbacks.final_validation import FinalValidation
from gptlab.train.callbacks.nonfinite import NonFiniteLossCheck
from gptlab.train.callbacks.preemption import PreemptionCheckpoint
from gptlab.train.callbacks.relog import RelogLastStep
from gptlab.train.callbacks.time_budget import TimeBudget
from gptlab.train.callbacks.training_clock import TrainingClock
from gptlab.train.module import GPTLitModule
from gptlab.train.step_axis import steps_done_axis


@dataclass
class Run:
    """What `trainer.fit` is called with, and what the summary reads afterwards."""

    model: GPT
    module: GPTLitModule
    datamodule: Any
    callbacks: list[Any]
    trainer: L.Trainer
    tokens_per_step: int
    ckpt_path: Optional[str]  # the checkpoint the fit continues from (None: from step 0)
    threads: cpu_threads.Threads  # torch's intra-op threads, and why (the banner's line)


def build_run(cfg: DictConfig, checked: Checked, ckpt_path: Optional[str]) -> Run:
    seed = run_seed(cfg)  # cfg.seed, or one keyed by the variant when paired_seeds=false (apps.seeds)
    L.seed_everything(seed, workers=True, verbose=False)
    torch.set_float32_matmul_precision(cfg.get("float32_matmul_precision", "high"))  # TF32 on GPUs
    datamodule = instantiate_data(cfg.data, checked.tokenizer, **({} if cfg.get("paired_seeds", True)
                                                                  else {"seed": seed}))
    # plain: how it runs is applied by runtime.parallelize (module.configure_model); each tensor keyed by its name
    model = GPT(checked.model_cfg, init_seed=seed)
    module = build_module(cfg, model, checked.tokenizer, checked.runtime)
    callbacks = build_callbacks(cfg)
    trainer = build_trainer(cfg, callbacks)
    tokens_per_step = configure_batching(trainer, cfg.global_batch_tokens, datamodule.batch_size,
                                         checked.model_cfg.block_size)
    module.tokens_per_step = tokens_per_step  # for the progress bar's tokens/s
    threads = cpu_threads.apply(checked.runtime.cpu_threads, trainer.num_devices)  # this node's ranks share its cores
    return Run(model, module, datamodule, callbacks, trainer, tokens_per_step, ckpt_path, threads)


def instantiate_data(node: DictConfig, tokenizer: Any, **kwargs: Any) -> Any:
    """The datamodule from the `data` node; a node Hydra cannot build (a _target_ that does not import, an argument
    its class does not take) is a ConfigError naming the key, not a traceback through Hydra's instantiate."""
    try:
        return hydra.utils.instantiate(node, tokenizer=tokenizer, **kwargs)
    except InstantiationException as err:
        if find_config_error(err) is not None:
            raise
        lines = [line for line in str(err).splitlines() if line.strip() and not line.startswith("full_key:")]
        said = re.sub(r",? set env var HYDRA_FULL_ERROR=1 to see chained exception\.?", ".", " ".join(lines))
        found = re.search(r"^full_key: (\S+)", str(err), re.MULTILINE)
        key = found.group(1) if found else "data"
        raise ConfigError(f"{key} cannot be built: {said} Change or drop {key} (conf/data/ has working "
                          "examples).") from err


def build_module(cfg: DictConfig, model: GPT, tokenizer: Any, runtime: Runtime) -> GPTLitModule:
    return GPTLitModule(
        model,
        optimizer=hydra.utils.instantiate(cfg.optimizer),
        scheduler=hydra.utils.instantiate(cfg.scheduler) if cfg.get("scheduler") else None,
        label_smoothing=cfg.label_smoothing,
        run_config=OmegaConf.to_container(cfg, resolve=True),
        token_bytes=torch.from_numpy(tokenizer.token_byte_lengths()),  # for val/bpb
        runtime=runtime,  # handed to runtime.parallelize when Lightning configures the model
        stages=Stages(**OmegaConf.to_container(cfg.stages, resolve=True)) if cfg.get("stages") else None,
    )


def build_callbacks(cfg: DictConfig) -> list[Any]:
    # The always-on ones around the configured ones: the non-finite check first, so that it holds a step's loss
    # before any other callback can save that step; the re-logging of a resumed run's last step after the others.
    configured = instantiate_dict(cfg.get("callbacks")).values()
    callbacks = [NonFiniteLossCheck(cfg.nonfinite_check_every), *configured, FinalValidation(),
                 TrainingClock(), RelogLastStep()]
    bound = budget.of(cfg)
    if bound is not None and bound.kind == "seconds":  # after the clock it reads
        callbacks.append(TimeBudget(bound.amount))
    if cfg.trainer.get("fast_dev_run"):  # debug=fast_dev_run writes nothing: no checkpoint of any kind, no run files
        callbacks = [c for c in callbacks if not isinstance(c, (ModelCheckpoint, PreemptionCheckpoint))]
    return callbacks


def build_trainer(cfg: DictConfig, callbacks: list[Any]) -> L.Trainer:
    # callbacks.progress_bar=null means no bar, not Lightning's own default bar in its place.
    no_bar = {} if any(isinstance(c, ProgressBar) for c in callbacks) or "enable_progress_bar" in cfg.trainer \
        else {"enable_progress_bar": False}
    # Every checkpoint callback null means no checkpoints, not Lightning's own default one (a full checkpoint under
    # tensorboard/<version>/checkpoints/ that no resume looks for).
    no_checkpoints = {} if any(isinstance(c, ModelCheckpoint) for c in callbacks) \
        or "enable_checkpointing" in cfg.trainer else {"enable_checkpointing": False}
    trainer = instantiate_trainer(cfg.trainer, callbacks=callbacks, logger=instantiate_loggers(
        cfg.get("logger"), str(cfg.name)), plugins=[AtomicCheckpointIO()], **no_bar, **no_checkpoints)
    # Every patch of Lightning, in one place: scalars at the step the progress bar and the checkpoint names show,
    # gptlab's signal handling, and DDP ranks > 0 started in the Hydra job and watched by gptlab.launch.rank_watch.
    lightning_internals.install(trainer, logged_step=steps_done_axis(trainer), rank_command=job_subprocess_cmd,
                                rank_watcher=watch_ranks)
    return trainer


def instantiate_trainer(node: DictConfig, **kwargs: Any) -> L.Trainer:
    """Lightning's Trainer from the `trainer` node; what Lightning refuses in it (a strategy name it does not know,
    a strategy whose package is missing, ...) is a ConfigError with Lightning's own words, not a traceback through
    Hydra's instantiate."""
    try:
        return hydra.utils.instantiate(node, **kwargs)
    except Exception as err:
        if find_config_error(err) is not None:
            raise
        cause = err.__cause__ or err
        said = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise ConfigError(f"Lightning cannot build the Trainer from the trainer.* settings: {said} "
                          f"{_way_out_of_trainer(node, said)} (docs/reference/configuration.md lists each trainer.* "
                          "setting with its values).") from err


def _way_out_of_trainer(node: DictConfig, said: str) -> str:
    """The trainer.* key Lightning's words name first (`strategy='bogus'`, `DeepSpeedStrategy`), to change or drop:
    its default is one Lightning builds."""
    named = sorted((found.start(), key) for key in node if not key.startswith("_")
                   for found in [re.search(rf"{re.escape(str(key))}\b", said, re.IGNORECASE)] if found)
    return f"Change or drop trainer.{named[0][1]}" if named else "Change the trainer.* override it names"


def instantiate_dict(group: DictConfig | None) -> dict[str, Any]:
    """Instantiate every entry of a config group that is a dict of `_target_` objects (callbacks, loggers);
    an entry set to null is switched off."""
    if not group:
        return {}
    return {name: hydra.utils.instantiate(node) for name, node in group.items()
            if node is not None and "_target_" in node}


# The run name's key in each logger: TensorBoard's and CSV's subdir (version), MLflow's run_name, W&B's name.
RUN_NAME_KEYS = ("version", "run_name", "name")


def instantiate_loggers(group: DictConfig | None, run_name: str) -> list[Any]:
    """The loggers; each names the run as TensorBoard's run list shows it: a sweep job's differing overrides, so it
    says which job is which without the HParams tab, and a single run's name (cfg.name: train, or the experiment's),
    not a bare `tensorboard`. The key that takes the name is the first of RUN_NAME_KEYS a node leaves empty ("")."""
    name = sweep_jobs.sweep_job_name() or run_name
    loggers = []
    for node in (group or {}).values():
        if node is None or "_target_" not in node:
            continue
        key = next((k for k in RUN_NAME_KEYS if node.get(k) == ""), None)
        loggers.append(hydra.utils.instantiate(node, **({key: name} if key and name else {})))
    return loggers


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
            raise ConfigError("set either global_batch_tokens or trainer.accumulate_grad_batches, not both: drop "
                              "trainer.accumulate_grad_batches (global_batch_tokens derives it), or set "
                              "global_batch_tokens=null.")
        trainer.accumulate_grad_batches = gradient_accumulation(
            global_batch_tokens, micro_batch, block_size, trainer.num_devices, trainer.num_nodes
        )
    if isinstance(trainer.val_check_interval, int):
        # Lightning counts it in micro-batches; gptlab's config means optimizer steps, like max_steps.
        trainer.val_check_interval *= trainer.accumulate_grad_batches
    return micro_batch * block_size * trainer.num_devices * trainer.num_nodes * trainer.accumulate_grad_batches
