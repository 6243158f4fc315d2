"""A sharded checkpoint (trainer=fsdp): a folder `<name>.ckpt/` that torch.distributed.checkpoint (DCP) and
Lightning's ModelParallelStrategy write, one `__<rank>_0.distcp` file per rank, DCP's `.metadata` index, and
Lightning's `meta.pt` (everything but the weights and optimizer states: loops, callbacks, hyperparameters).

The folder is renamed into place whole (execution/fsdp_strategy.py); these checks still name what is missing in one
that was copied or damaged afterwards, so resume=auto skips it like a truncated file.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from gptlab.checkpoint.dcp_index import INDEX_FILE, ForeignIndex, read_index
from gptlab.lightning_internals import SHARDED_META_FILE, load_sharded_keys

META_FILE = SHARDED_META_FILE  # Lightning's meta.pt: the checkpoint without weights and optimizer states


def is_sharded(path: Path) -> bool:
    """Whether `path` is a sharded checkpoint folder (rather than a one-file checkpoint)."""
    return path.is_dir() and ((path / META_FILE).exists() or (path / INDEX_FILE).exists())


def missing_parts(path: Path) -> list[str]:
    """The files a sharded checkpoint lacks (index, Lightning's meta.pt, any shard the index names); an empty or
    truncated index counts as missing. Raises ForeignIndex (dcp_index) for an index that names foreign objects."""
    index_file = path / INDEX_FILE
    if not index_file.is_file() or index_file.stat().st_size == 0:
        return [INDEX_FILE]
    try:
        index = read_index(index_file)
    except ForeignIndex:
        raise
    except Exception:  # a truncated or garbled index: unpickling raises EOFError, UnpicklingError, ...
        return [INDEX_FILE]
    wanted = {INDEX_FILE, META_FILE} | {item.relative_path for item in (index.storage_data or {}).values()}
    return sorted(name for name in wanted if not (path / name).is_file() or (path / name).stat().st_size == 0)


def read_meta(path: Path) -> dict[str, Any]:
    """Lightning's meta.pt: the checkpoint without its weights and optimizer states."""
    return torch.load(path / META_FILE, map_location="cpu", weights_only=True)


def read_full_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The LightningModule's whole state dict (the `model.`-prefixed weights), gathered from every rank's shard in
    this one process: DCP reads each tensor's chunks and joins them, whatever the world size that wrote them."""
    with warnings.catch_warnings():  # "torch.distributed is unavailable...": one process reading is what we want
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
        from gptlab.checkpoint.dcp_reader import SafeReader  # here: DCP's package costs seconds to import

        return load_sharded_keys({"state_dict"}, SafeReader(str(path)))["state_dict"]
