"""trainer=fsdp: Lightning's ModelParallelStrategy (FSDP2, `fully_shard`) with gptlab's sharding plan and checkpoints
that are whole or absent. ModelParallelStrategy leaves the parallelism to the LightningModule's `configure_model`,
which calls the one `runtime.parallelize` with this strategy's mesh and `layout` below; the sharding plan is
execution/fsdp2.py. Checkpoints are sharded (torch.distributed.checkpoint): a folder with one `__<rank>_0.distcp` file
per rank, `.metadata` and Lightning's `meta.pt` (loops, callbacks, hyperparameters). Lightning writes that folder in
place, so a kill mid-save would leave a folder that looks like a checkpoint; here every rank writes into a hidden
temp folder beside it which rank 0 renames into place once all ranks are done.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from gptlab.atomic import remove, replace_folder
from gptlab.checkpoint.dcp_index import INDEX_FILE, ForeignIndex, read_index
from gptlab.checkpoint.dcp_reader import SafeReader
from gptlab.errors import ConfigError
from gptlab.lightning_internals import set_data_parallel_size, sharded_loads_through


def partial_name(path: Path) -> Path:
    """Where a sharded checkpoint is written before it is whole: hidden and not `*.ckpt`, so no reader takes it."""
    return path.with_name(f".{path.name}.partial")


class GPTFSDPStrategy(ModelParallelStrategy):
    """FSDP2 over all ranks (one data-parallel mesh dimension, no tensor parallelism)."""

    def __init__(self, reshard_after_forward: bool = True, **kwargs: Any) -> None:
        super().__init__(data_parallel_size="auto", tensor_parallel_size=1, save_distributed_checkpoint=True, **kwargs)
        self.reshard_after_forward = reshard_after_forward

    def setup_environment(self) -> None:
        # Lightning sets data_parallel_size="auto" to the node count (HSDP's layout); gptlab shards over every rank.
        set_data_parallel_size(self, self.num_nodes * self.num_processes)
        super().setup_environment()

    def layout(self) -> dict[str, Any]:
        """What runtime.parallelize needs to shard: the mesh, the gathered weights' dtype (bf16 under bf16-mixed;
        the shards and Adam states stay fp32) and whether blocks reshard after forward."""
        bf16 = getattr(self.precision_plugin, "precision", None) == "bf16-mixed"
        return {"mesh": self.device_mesh["data_parallel"], "param_dtype": torch.bfloat16 if bf16 else None,
                "reshard_after_forward": self.reshard_after_forward}

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | os.PathLike[str],
                        storage_options: Optional[Any] = None) -> None:
        path = Path(self.broadcast(str(filepath)))
        partial = partial_name(path)
        if self.global_rank == 0:
            remove(partial)  # a save killed before: gptlab's own temp folder
        self.barrier("fsdp_checkpoint_clean")
        super().save_checkpoint(checkpoint, partial, storage_options)
        self.barrier("fsdp_checkpoint_written")
        if self.global_rank == 0:
            replace_folder(partial, path)
        self.barrier("fsdp_checkpoint_renamed")

    def load_checkpoint(self, checkpoint_path: str | os.PathLike[str], weights_only: Optional[bool] = None
                        ) -> dict[str, Any]:
        # DCP's own reader unpickles the index and loads non-tensor entries with weights_only=False. A foreign index
        # is refused here in one line (inside DCP's load it would be logged, retried per rank and wrapped).
        index = Path(checkpoint_path) / INDEX_FILE
        if index.is_file():
            try:
                read_index(index)
            except ForeignIndex as err:
                raise ConfigError(f"{checkpoint_path}: its {INDEX_FILE} cannot be read: {err}") from err
        with sharded_loads_through(SafeReader):
            return super().load_checkpoint(checkpoint_path, weights_only=weights_only)


def shards_weights(strategy: Any) -> bool:
    """Whether each rank holds only a shard of every weight: a callback that reads or runs the whole model on one
    rank (probes, samples, zero-shot) cannot run there."""
    return isinstance(strategy, ModelParallelStrategy)
