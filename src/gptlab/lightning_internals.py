"""The one door to Lightning's (and torch's) private names: every read of one, and every patch of one, is a small
function here; the rest of gptlab calls these or public API (tests/test_lightning_internals.py scans for strays).

`PRIVATE` lists each name with the door function that uses it and why nothing public will do, so an upgrade that
removes one fails tests/test_lightning_internals.py naming it, instead of a run failing far from here. pyproject pins
Lightning to the range they were checked against; before widening it, run that test. `install` applies every patch,
called once, where the run's Trainer is built (apps/build.py); gptlab's replacements come in as arguments, since they
live in higher layers. This module sits in the base layer so that every layer may import it; it imports Lightning
only inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional


@dataclass(frozen=True)
class Private:
    path: str  # "module:attr.attr" (imported), or "<instance>:attr.attr" on a fresh object made by INSTANCES
    used_by: str  # the door function that uses it
    why: str


PRIVATE = (
    Private("lightning.pytorch.strategies.launchers.subprocess_script:_hydra_subprocess_cmd",
            "install", "the only hook that chooses the command DDP ranks > 0 are started with"),
    Private("lightning.pytorch.strategies.launchers.subprocess_script:_launch_process_observer",
            "install", "the watcher of DDP ranks > 0, which SIGKILLs the whole job silently when "
            "one exits non-zero; gptlab.launch.rank_watch replaces it"),
    Private("trainer:_signal_connector.register_signal_handlers",
            "install", "switched off: Lightning's SIGTERM handler broadcasts inside the handler and hangs "
            "DDP jobs; gptlab.signals and train/callbacks/preemption.py replace it"),
    Private("trainer:_logger_connector.log_metrics",
            "install", "the one call through which Lightning logs, wrapped to give it the step: "
            "Lightning's own step is one behind the optimizer steps done (gptlab.train.step_axis)"),
    Private("trainer:_logger_connector.should_update_logs",
            "logs_this_step", "whether this step's metrics reach the loggers: skip computing the others"),
    Private("trainer:fit_loop._should_accumulate",
            "completes_optimizer_step", "whether this micro-batch completes an optimizer step"),
    Private("trainer:fit_loop.epoch_loop.total_batch_idx",
            "micro_batches_trained", "micro-batches trained, restored from a checkpoint on resume"),
    Private("trainer:fit_loop.epoch_loop.batch_progress.current.processed",
            "batches_this_epoch", "batches trained this epoch: the data position saved for exact resume"),
    Private("trainer:fit_loop.epoch_loop._should_check_val_fx",
            "validation_follows_step", "whether a validation follows this step: a preemption then saves at its "
            "first batch, so that a resume runs it (train/callbacks/preemption.py)"),
    Private("trainer:fit_loop._data_fetcher",
            "validation_follows_step", "the argument _should_check_val_fx takes"),
    Private("trainer:fit_loop.epoch_loop.val_loop.batch_progress",
            "val_batch_progress", "a validation cut by a preemption is saved as begun and not done (Lightning's "
            "restart mid-evaluation), so that a resume runs it again"),
    Private("trainer:fit_loop.epoch_loop.batch_progress.current.completed",
            "epoch_batches_done", "whether the last batch of this epoch completed before a save (data/position.py)"),
    Private("trainer:fit_loop.epoch_loop.max_steps",
            "end_training_after", "ends training after the step just done as reaching trainer.max_steps does (final "
            "validation, last checkpoint, summary): a seconds budget's end (train/callbacks/time_budget.py); "
            "Trainer.max_steps has no setter"),
    Private("lightning_module:_trainer",
            "attached_trainer", "the trainer a module is attached to, or None (the public property raises)"),
    Private("torch.utils.tensorboard.writer:SummaryWriter._get_file_writer",
            "tensorboard_file_writer", "writes hparams summaries as TensorBoardLogger.log_hyperparams does"),
    Private("mlflow_logger:_mlflow_client", "use_mlflow_client",
            "the client MLFlowLogger makes every call to the store through; gptlab's makes a call that SQLite "
            "refused as locked again (train/mlflow_logger.py); the logger takes no client as an argument"),
    Private("model_parallel_strategy:_data_parallel_size",
            "set_data_parallel_size", "trainer=fsdp shards over every rank, not only across nodes"),
    Private("lightning.fabric.strategies.model_parallel:_METADATA_FILENAME",
            "SHARDED_META_FILE", "the name of Lightning's meta.pt in a sharded checkpoint folder"),
    Private("torch.distributed.checkpoint.state_dict_loader:_load_state_dict_from_keys",
            "load_sharded_keys", "reads a sharded checkpoint's whole weights in one process (what torch's "
            "own dcp_to_torch_save uses), without its optimizer states"),
    Private("lightning.fabric.strategies.model_parallel:_distributed_checkpoint_load",
            "sharded_loads_through", "the one call through which ModelParallelStrategy reads a sharded checkpoint's "
            "tensors, with torch's default reader (which unpickles the index and runs torch.load(weights_only="
            "False) on the non-tensor entries); there is no argument to give it another reader"),
    Private("lr_scheduler:_last_lr", "set_last_lr",
            "what get_last_lr() reports until the next step: torch has no setter, and a resumed run whose lr the "
            "config changed (gptlab.train.resumed_optimizer) must report the new one at once"),
    Private("torch.utils._pytree:tree_leaves",
            "tensor_leaves", "the tensors of a nested checkpoint dict, whatever containers hold them"),
    Private("torch._C:_get_sdp_priority_order",
            "sdpa_priority_order", "torch's shipped order of attention kernels, restored by the GPU benchmark"),
    Private("model_checkpoint:_monitor_candidates",
            "monitor_candidates", "the metrics a checkpoint name is formatted from"),
    *(Private(f"model_checkpoint:{name}", door,
              "last.ckpt as a hard link of the checkpoint saved at the same step: Lightning's only choices are a "
              "second full copy or a symbolic link (train/callbacks/checkpoint.py)")
      for name, door in (("_save_last_checkpoint", "routes_save_last"),
                         ("_save_last_checkpoint", "lightning_save_last"),
                         ("_last_checkpoint_saved", "last_checkpoint_saved"),
                         ("_last_checkpoint_saved", "mark_last_checkpoint_saved"),
                         ("_last_global_step_saved", "last_global_step_saved"),
                         ("_enable_version_counter", "version_counter_enabled"))),
    *(Private(f"torch:ops.aten.{name}", "matmul_and_attention_ops",
              "a kernel whose output selective activation checkpointing keeps (execution/checkpointing.py): "
              "float8's scaled matmul and SDPA's fused attention are private aten ops")
      for name in ("_scaled_mm", "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                   "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                   "_flash_attention_forward", "_efficient_attention_forward")),
    *(Private(f"torch._C:_functorch.{name}", door,
              "a fused sweep's members run attention and norms per member inside vmap (execution/fused.py): "
              "torch.func has no public way to unwrap a batched tensor and wrap the result back")
      for name, door in (("is_batchedtensor", "is_batched"), ("maybe_get_level", "batch_level"),
                         ("_unwrap_batched", "unwrap_batched"), ("_add_batch_dim", "add_batch_dim"))),
    Private("torch.utils._python_dispatch:TorchDispatchMode", "dispatch_mode",
            "counting the aten ops a step dispatches (tools/benchmarks/fused_speed.py): no public base class"),
)

# In a Lightning checkpoint: where the fit loop keeps its per-epoch batch counters (runs/relayout.py moves them).
CHECKPOINT_BATCH_COUNTERS = "loops.fit_loop['epoch_loop.batch_progress']"
SHARDED_META_FILE = "meta.pt"  # _METADATA_FILENAME; tests/test_lightning_internals.py checks the two agree


# ---- reading the trainer's loops and connectors

def logs_this_step(trainer: Any) -> bool:
    """Whether this micro-batch completes a training step whose on_step metrics reach the loggers (every
    trainer.log_every_n_steps); Lightning drops what the others log (it logs only after a step's last micro-batch),
    so computing and self.log-ing it there is wasted work, and on a GPU a self.log of a float is a blocking copy.
    Lightning's own tests, so the two never disagree."""
    return trainer._logger_connector.should_update_logs and completes_optimizer_step(trainer)


def completes_optimizer_step(trainer: Any) -> bool:
    """Whether the micro-batch about to be trained completes an optimizer step (not one accumulated into the next)."""
    return not trainer.fit_loop._should_accumulate()


def end_training_after(trainer: Any, step: int) -> None:
    """Training ends once `step` optimizer steps are done, as if trainer.max_steps were `step`."""
    trainer.fit_loop.epoch_loop.max_steps = step


def micro_batches_trained(trainer: Any) -> int:
    """Micro-batches this rank has trained, the current one included (read in on_train_batch_end); restored from
    the checkpoint, so the count continues across a resume."""
    return trainer.fit_loop.epoch_loop.total_batch_idx + 1


def batches_this_epoch(trainer: Any) -> int:
    """Micro-batches this rank has trained in the current epoch."""
    return trainer.fit_loop.epoch_loop.batch_progress.current.processed


def epoch_batches_done(trainer: Any) -> tuple[int, int]:
    """(processed, completed) micro-batches of the current epoch: equal and non-zero when a checkpoint is saved after
    a batch ended (in or after a validation) rather than at the batch's end."""
    progress = trainer.fit_loop.epoch_loop.batch_progress.current
    return progress.processed, progress.completed


def validation_follows_step(trainer: Any) -> bool:
    """Whether Lightning validates right after this optimizer step (at its interval, or the final validation)."""
    return trainer.fit_loop.epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher)


def val_batch_progress(trainer: Any) -> Any:
    """The fit loop's validation batch counters (state_dict/load_state_dict), saved in checkpoints."""
    return trainer.fit_loop.epoch_loop.val_loop.batch_progress


def checkpoint_val_batch_counters(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's validation batch counters ({"current": {...}, "total": {...}}), {} when it holds none."""
    return checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.val_loop.batch_progress", {})


def checkpoint_batch_counters(checkpoint: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """A checkpoint's per-epoch batch counters ({"current": {...}, "total": {...}}), None when it holds none."""
    return checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress")


def attached_trainer(module: Any) -> Any:
    """The Trainer `module` is attached to, or None (Lightning's `module.trainer` raises instead)."""
    return module._trainer


# ---- other private objects

def tensorboard_file_writer(writer: Any) -> Any:
    """The FileWriter of a SummaryWriter, to which raw summaries (the HParams tab's) are added."""
    return writer._get_file_writer()


def use_mlflow_client(logger: Any, client: Any) -> None:
    """`logger` (an MLFlowLogger) calls the store through `client` from now on."""
    logger._mlflow_client = client


def set_data_parallel_size(strategy: Any, size: int) -> None:
    """A ModelParallelStrategy's data-parallel size, set before it builds its device mesh."""
    strategy._data_parallel_size = size


def load_sharded_keys(keys: set[str], reader: Any) -> dict[str, Any]:
    """The top-level `keys` of a sharded (DCP) checkpoint, read whole in this one process by `reader` (a DCP
    StorageReader: gptlab's restricts what is unpickled)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    return _load_state_dict_from_keys(keys=keys, storage_reader=reader)


@contextlib.contextmanager
def sharded_loads_through(reader_for: Callable[[Any], Any]) -> Iterator[None]:
    """While open, Lightning's ModelParallelStrategy reads sharded checkpoints with the DCP StorageReader
    `reader_for(path)` returns (gptlab's restricts what is unpickled: checkpoint/dcp_index.py)."""
    from lightning.fabric.strategies import model_parallel
    from torch.distributed.checkpoint import load

    original = model_parallel._distributed_checkpoint_load
    model_parallel._distributed_checkpoint_load = lambda state, path: load(state, storage_reader=reader_for(path))
    try:
        yield
    finally:
        model_parallel._distributed_checkpoint_load = original


def set_last_lr(scheduler: Any, lrs: list[float]) -> None:
    """The lrs a torch scheduler's get_last_lr() reports until its next step."""
    scheduler._last_lr = lrs


def tensor_leaves(tree: Any) -> list[Any]:
    """The leaves of nested dicts, lists and tuples."""
    from torch.utils._pytree import tree_leaves

    return tree_leaves(tree)


def sdpa_priority_order() -> list[int]:
    """torch's current priority order of scaled-dot-product-attention backends (SDPBackend values)."""
    import torch

    return list(torch._C._get_sdp_priority_order())


# ---- torch.func's batched tensors, for the fused sweep's per-member kernels (execution/fused.py)

def is_batched(t: Any) -> bool:
    from torch._C import _functorch

    return bool(_functorch.is_batchedtensor(t))


def batch_level(t: Any) -> int:
    from torch._C import _functorch

    return _functorch.maybe_get_level(t)


def unwrap_batched(t: Any, level: int) -> tuple[Any, int]:
    """The plain tensor under vmap's wrapper at `level`, and the dim the members are in."""
    from torch._C import _functorch

    return _functorch._unwrap_batched(t, level)


def add_batch_dim(t: Any, dim: int, level: int) -> Any:
    """`t` wrapped back as vmap's batched tensor at `level`, its members along `dim`."""
    from torch._C import _functorch

    return _functorch._add_batch_dim(t, dim, level)


def dispatch_mode() -> type:
    """torch's base class for a mode that sees every aten op dispatched."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def matmul_and_attention_ops() -> frozenset[Any]:
    """The aten ops (their default overloads) that do a block's matmul FLOPs: the public matmuls and the private
    scaled-matmul and fused-attention kernels, those present in this build of torch."""
    import torch

    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "baddbmm",
             *(e.path.rpartition(".")[2] for e in PRIVATE if e.used_by == "matmul_and_attention_ops"))
    return frozenset(getattr(aten, name).default for name in names if hasattr(aten, name))


# ---- ModelCheckpoint's bookkeeping of last.ckpt

def routes_save_last(cls: type) -> type:
    """Class decorator for a ModelCheckpoint subclass: Lightning's private `_save_last_checkpoint` calls the class's
    `write_last(trainer, monitor_candidates)` instead (Lightning has no public hook for how last.ckpt is written)."""
    cls._save_last_checkpoint = lambda self, trainer, candidates: self.write_last(trainer, candidates)
    return cls


def lightning_save_last(callback: Any, trainer: Any, candidates: dict[str, Any]) -> None:
    """Lightning's own write of last.ckpt: a full copy, or the symbolic link of save_last="link"."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    ModelCheckpoint._save_last_checkpoint(callback, trainer, candidates)


def last_checkpoint_saved(callback: Any) -> str:
    """The path `callback` saved last ("" before its first save)."""
    return callback._last_checkpoint_saved


def mark_last_checkpoint_saved(callback: Any, path: str) -> None:
    callback._last_checkpoint_saved = path


def last_global_step_saved(callback: Any) -> int:
    return callback._last_global_step_saved


def version_counter_enabled(callback: Any) -> bool:
    """Whether `callback` names a file that exists already `-v1`, `-v2`... instead of replacing it."""
    return callback._enable_version_counter


def monitor_candidates(callback: Any, trainer: Any) -> dict[str, Any]:
    return callback._monitor_candidates(trainer)


# ---- the patches

def install(trainer: Any, *, logged_step: Callable[[Mapping[str, Any]], Optional[int]],
            rank_command: Callable[[int], Any], rank_watcher: Callable[[list[Any]], None]) -> None:
    """Every patch of Lightning gptlab makes, for a run's `trainer`, before it fits:
    - the step a metrics dict logged without one goes to: `logged_step(metrics)`, or Lightning's own when None;
    - Lightning's signal handlers are not installed (gptlab.signals' flag stays in force for the whole fit);
    - DDP ranks > 0 are started with `rank_command(local_rank)` -> (argv, cwd), and watched by
      `rank_watcher(child_processes)` instead of Lightning's observer."""
    import lightning.pytorch.strategies.launchers.subprocess_script as launcher

    if not hasattr(launcher, "_hydra_subprocess_cmd"):
        raise RuntimeError("this Lightning version no longer has subprocess_script._hydra_subprocess_cmd; "
                           "gptlab.lightning_internals must be updated before DDP runs under Hydra.")
    launcher._hydra_subprocess_cmd = rank_command
    launcher._launch_process_observer = rank_watcher  # a lost rank: one message, not a silent SIGKILL of all
    trainer._signal_connector.register_signal_handlers = lambda: None
    connector = trainer._logger_connector
    lightning_log_metrics = connector.log_metrics

    def log_metrics(metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        lightning_log_metrics(metrics, logged_step(metrics) if step is None else step)

    connector.log_metrics = log_metrics


def _trainer() -> Any:
    import lightning as L

    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)


def _lightning_module() -> Any:
    import lightning as L

    return L.LightningModule()


def _model_parallel_strategy() -> Any:
    from lightning.pytorch.strategies import ModelParallelStrategy

    return ModelParallelStrategy()


def _mlflow_logger() -> Any:
    from lightning.pytorch.loggers import MLFlowLogger

    return MLFlowLogger(tracking_uri="http://127.0.0.1:9")  # a REST store connects at its first call only


def _model_checkpoint() -> Any:
    from lightning.pytorch.callbacks import ModelCheckpoint

    return ModelCheckpoint()


# attributes set in __init__ need an instance
def _lr_scheduler() -> Any:
    import torch

    return torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                                             lambda step: 1.0)


INSTANCES = {"lr_scheduler": _lr_scheduler, "trainer": _trainer, "lightning_module": _lightning_module,
             "model_parallel_strategy": _model_parallel_strategy, "model_checkpoint": _model_checkpoint,
             "mlflow_logger": _mlflow_logger}


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
