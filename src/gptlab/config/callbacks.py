"""Schemas of the callbacks and loggers conf/callbacks/ and conf/logger/ ship, found by their `_target_`.

These groups are dicts of named nodes that a user may add to or null out (`callbacks.progress_bar=null`), so
they are not typed at compose (Hydra's struct mode already refuses a misspelt key there); `check` finds each
node's schema by its `_target_` and checks its values, and a node of another target against its signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import gptlab.config.ranges as c
from gptlab.config.fields import setting


@dataclass
class ModelCheckpoint:
    _target_: str = "gptlab.train.callbacks.ModelCheckpoint"
    dirpath: Optional[str] = setting(None, "where the checkpoints go", c.optional(c.text))
    filename: Optional[str] = setting(None, "file name pattern", c.optional(c.text))
    monitor: Optional[str] = setting(None, "the logged metric that picks the best checkpoints",
                                     c.optional(c.logged_metric))
    mode: str = setting("min", "min | max of monitor is best", c.choice("min", "max"))
    save_top_k: int = setting(1, "best checkpoints kept; 0 = none, -1 = all", c.integer(-1))
    save_last: Any = setting(None, "also refresh last.ckpt, for resuming",
                             c.optional(c.either(c.boolean, c.choice("link"), wanted="use true, false or link")))
    every_n_train_steps: Optional[int] = setting(None, "optimizer steps between saves",
                                                 c.optional(c.non_negative_int))
    auto_insert_metric_name: bool = setting(True, "prefix each metric in filename with its name", c.boolean)
    enable_version_counter: bool = setting(True, "false: refresh last.ckpt, never write last-v1.ckpt", c.boolean)


@dataclass
class PreemptionCheckpoint:
    _target_: str = "gptlab.train.callbacks.preemption.PreemptionCheckpoint"
    dirpath: str = setting(help="where the preemption checkpoint goes", check=c.text)
    filename: str = setting("last", "its file name, without .ckpt: last replaces last.ckpt (whole until the new one "
                            "is), so a preemption adds no copy on disk", c.text)
    grace_seconds: Optional[float] = setting(
        30, "a scheduler SIGKILLs this long after its SIGTERM (SLURM's KillWait, Kubernetes' default: 30 s): a step "
        "still running then (or measured to need longer) stops the run at once without a save, naming the last "
        "checkpoint on disk; null: wait for the step however long. One process only: under DDP the step's end is "
        "awaited as before", c.optional(c.number(0.0)))


@dataclass
class TokenThroughput:
    _target_: str = "gptlab.train.callbacks.TokenThroughput"
    window_size: int = setting(20, "batches averaged over", c.positive_int)
    peak_flops: Optional[float] = setting(
        None, "the device's peak FLOP/s for x_throughput/mfu; null = gptlab's dense datasheet table for the GPU "
        "(printed when training starts)", c.optional(c.number(0.0, low_open=True)))


@dataclass
class TextSamples:
    _target_: str = "gptlab.train.callbacks.TextSamples"
    prompts: list[str] = setting(["\n", "The "], "each continued separately", c.list_of_text)
    max_new_tokens: int = setting(64, "tokens generated per prompt", c.non_negative_int)
    temperature: float = setting(0.8, "0 = greedy", c.number(0.0))
    top_k: Optional[int] = setting(40, "null = sample from the whole vocabulary", c.optional(c.positive_int))
    seed: int = setting("${seed}", "the sampling RNG, the same text each validation for the same weights", c.seed)


@dataclass
class StepProgressBar:
    _target_: str = "gptlab.train.callbacks.progress.StepProgressBar"
    refresh_rate: int = setting(10, "optimizer steps between redraws; 0 = no bar", c.non_negative_int)


@dataclass
class StabilityProbes:
    _target_: str = "gptlab.train.callbacks.StabilityProbes"
    every_n_steps: int = setting(50, "optimizer steps between probes (cost measured in README: a few % of a step at "
                                 "N=1)", c.positive_int)
    batch_rows: int = setting(2, "rows of the step's batch the forward probes run on", c.positive_int)


@dataclass
class LossSpikeGuard:
    _target_: str = "gptlab.train.callbacks.LossSpikeGuard"
    z_threshold: Optional[float] = setting(None, "k: skip when (loss - mean) / std > k; null = off, e.g. 6.0",
                                           c.optional(c.number(0.0, low_open=True)))
    window: int = setting(100, "accepted step losses the mean and std are taken over", c.integer(2))
    min_history: int = setting(20, "no skipping before this many losses are in the window", c.integer(2))
    max_consecutive: int = setting(10, "this many skips in a row stop the run; train/skipped_steps counts them all",
                                   c.integer(2))


@dataclass
class ZeroShotEval:
    _target_: str = "gptlab.train.callbacks.ZeroShotEval"
    tasks: list[str] = setting([], "off (costs nothing) until given, e.g. [lambada] or [lambada,hellaswag]",
                               c.list_of_text)
    every_n_steps: int = setting(500, "optimizer steps between evaluations", c.positive_int)
    limit: Optional[int] = setting(500, "first N examples of each task (other DDP ranks wait meanwhile); null = all",
                                   c.optional(c.positive_int))
    batch_size: int = setting(16, "rows per forward pass", c.positive_int)
    data: Any = setting({"lambada": "EleutherAI/lambada_openai", "hellaswag": "Rowan/hellaswag"},
                        "a Hub dataset or a local .jsonl file (or dir of them) per task, as eval.yaml's task_data")


@dataclass
class TensorBoardLogger:
    _target_: str = "gptlab.train.tensorboard_logger.RunTensorBoardLogger"
    save_dir: str = setting(help="the run dir", check=c.text)
    name: str = setting("tensorboard", "subdir of save_dir", c.text)
    version: Any = setting("", "set by train(): the run's name, or a sweep job's overrides (never version_N)")
    default_hp_metric: bool = setting(
        False, "log Lightning's placeholder hp_metric (gptlab logs val-best/loss)", c.boolean)


def RUN_NAME(field: str, value: Any) -> None:
    """A logger's run-name key: "" (train() sets the run's name) or a name of your own."""
    if not isinstance(value, str):
        raise c.fail(field, value, f"use a name, e.g. {field}=run1, or {field}='' for the run's own")


@dataclass
class CSVLogger:
    _target_: str = "gptlab.train.run_loggers.RunCSVLogger"
    save_dir: str = setting(help="the run dir", check=c.text)
    name: str = setting("csv", "subdir of save_dir", c.text)
    version: Any = setting("", "set by train(): the run's name, or a sweep job's overrides (never version_N)",
                           RUN_NAME)


@dataclass
class WandbLogger:
    _target_: str = "gptlab.train.run_loggers.RunWandbLogger"
    needs_package: ClassVar[str] = "wandb"
    save_dir: str = setting(help="the run dir: the run lands in <run dir>/wandb/", check=c.text)
    offline: bool = setting(True, "true: no account, no network (`wandb sync <run dir>/wandb/offline-run-*` uploads "
                            "it later); false: logs to wandb.ai as you (`wandb login` first)", c.boolean)
    project: str = setting("gptlab", "the W&B project", c.text)
    group: str = setting("${name}", "groups the runs of a sweep (the experiment's name)", c.text)
    name: str = setting("", "set by train(): the run's name, or a sweep job's overrides", RUN_NAME)


@dataclass
class MLFlowLogger:
    _target_: str = "gptlab.train.mlflow_logger.RunMLFlowLogger"
    needs_package: ClassVar[str] = "mlflow"
    tracking_uri: str = setting("${paths.tracking_uri}", "the MLflow store (paths.tracking_uri)", c.text)
    save_dir: str = setting(help="the run dir: each MLflow run is tagged with it", check=c.text)
    experiment_name: str = setting("${name}", "the MLflow experiment (the run's or the experiment's name)", c.text)
    run_name: str = setting("", "set by train(): the run's name, or a sweep job's overrides", RUN_NAME)
    artifact_location: Optional[str] = setting(
        None, "where a new MLflow experiment keeps artifacts (text samples); null = mlartifacts/ beside an SQLite "
        "store", c.optional(c.text))


BY_TARGET: dict[str, type] = {schema._target_: schema for schema in (  # type: ignore[attr-defined]
    ModelCheckpoint, PreemptionCheckpoint, TokenThroughput, TextSamples, StepProgressBar, StabilityProbes,
    LossSpikeGuard, ZeroShotEval, TensorBoardLogger, CSVLogger, WandbLogger, MLFlowLogger)}
BY_TARGET["lightning.pytorch.callbacks.ModelCheckpoint"] = ModelCheckpoint  # the class gptlab's extends, same options
