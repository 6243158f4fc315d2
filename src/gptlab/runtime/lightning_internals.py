"""Every private Lightning (and torch) name gptlab relies on, in one list, so an upgrade that removes one fails
tests/test_lightning_internals.py naming it, instead of a run failing far from here.

pyproject pins Lightning to the range these were checked against; before widening it, run that test.
Each entry: where the name lives, how to reach it, and which gptlab file uses it and why nothing public will do.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Private:
    path: str  # "module:attr.attr" (imported), or "<instance>:attr.attr" on a fresh object made by INSTANCES
    used_by: str
    why: str


PRIVATE = (
    Private("lightning.pytorch.strategies.launchers.subprocess_script:_hydra_subprocess_cmd",
            "gptlab/runtime/hydra_ddp.py", "the only hook that chooses the command DDP ranks > 0 are started with"),
    Private("lightning.pytorch.strategies.launchers.subprocess_script:_launch_process_observer",
            "gptlab/runtime/hydra_ddp.py", "the watcher of DDP ranks > 0, which SIGKILLs the whole job silently when "
            "one exits non-zero; gptlab.runtime.rank_watch replaces it"),
    Private("trainer:_signal_connector.register_signal_handlers",
            "gptlab/apps/train.py", "switched off: Lightning's SIGTERM handler broadcasts inside the handler and hangs "
            "DDP jobs; gptlab.signals and callbacks/preemption.py replace it"),
    Private("torch.utils.tensorboard.writer:SummaryWriter._get_file_writer",
            "gptlab/train/callbacks/hparams.py", "writes hparams summaries as TensorBoardLogger.log_hyperparams does"),
    Private("trainer:fit_loop._should_accumulate",
            "gptlab/train/callbacks/final_validation.py", "whether this micro-batch completes an optimizer step"),
    Private("trainer:fit_loop.epoch_loop._should_check_val_fx",
            "gptlab/runtime/preemption.py", "whether a validation follows this step: a preemption then saves at its "
            "first batch, so that a resume runs it"),
    Private("trainer:fit_loop._data_fetcher",
            "gptlab/runtime/preemption.py", "the argument _should_check_val_fx takes"),
    Private("trainer:fit_loop.epoch_loop.val_loop.batch_progress",
            "gptlab/runtime/preemption.py", "a validation cut by a preemption is saved as begun and not done "
            "(Lightning's restart mid-evaluation), so that a resume runs it again"),
    Private("trainer:fit_loop.epoch_loop.total_batch_idx",
            "gptlab/train/callbacks/throughput.py", "micro-batches trained, restored from a checkpoint on resume"),
    Private("trainer:fit_loop.epoch_loop.batch_progress.current.processed",
            "gptlab/data/position.py", "batches trained this epoch: the data position saved for exact resume"),
    Private("trainer:_logger_connector.should_update_logs",
            "gptlab/train/module.py", "whether this step's metrics reach the loggers: skip computing the others"),
    Private("trainer:_logger_connector.log_metrics",
            "gptlab/train/step_axis.py", "the one call through which Lightning logs, wrapped to give it the step: "
            "Lightning's own step is one behind the optimizer steps done"),
    Private("model_parallel_strategy:_data_parallel_size",
            "gptlab/runtime/fsdp_strategy.py", "trainer=fsdp shards over every rank, not only across nodes"),
    Private("lightning.fabric.strategies.model_parallel:_METADATA_FILENAME",
            "gptlab/checkpoint/sharded.py", "the name of Lightning's meta.pt in a sharded checkpoint folder"),
    Private("torch.distributed.checkpoint.state_dict_loader:_load_state_dict_from_keys",
            "gptlab/checkpoint/sharded.py", "reads a sharded checkpoint's whole weights in one process (what torch's "
            "own dcp_to_torch_save uses), without its optimizer states"),
    *(Private(f"model_checkpoint:{name}", "gptlab/train/callbacks/checkpoint.py",
              "last.ckpt as a hard link of the checkpoint saved at the same step: Lightning's only choices are a "
              "second full copy or a symbolic link")
      for name in ("_save_last_checkpoint", "_last_checkpoint_saved", "_last_global_step_saved",
                   "_enable_version_counter")),
)


def _trainer() -> Any:
    import lightning as L

    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)


def _model_parallel_strategy() -> Any:
    from lightning.pytorch.strategies import ModelParallelStrategy

    return ModelParallelStrategy()


def _model_checkpoint() -> Any:
    from lightning.pytorch.callbacks import ModelCheckpoint

    return ModelCheckpoint()


# attributes set in __init__ need an instance
INSTANCES = {"trainer": _trainer, "model_parallel_strategy": _model_parallel_strategy,
             "model_checkpoint": _model_checkpoint}


def resolve(entry: Private) -> Any:
    """The object `entry` names; raises AttributeError naming it, its user and why, when it is gone."""
    root, _, attrs = entry.path.partition(":")
    try:
        obj = INSTANCES[root]() if root in INSTANCES else importlib.import_module(root)
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
    except (AttributeError, ImportError) as err:
        raise AttributeError(f"{entry.path} is gone (used by {entry.used_by}: {entry.why}): {err}") from err
    return obj
