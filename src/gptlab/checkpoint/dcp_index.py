"""Reading a sharded checkpoint without running pickled code. torch.distributed.checkpoint writes its `.metadata`
index with pickle and reads it back with a plain `pickle.load`, and it loads the non-tensor entries of the shards
(optimizer param groups, loop counters) with `torch.load(weights_only=False)`: a folder from elsewhere could run
anything. `SafeReader` is DCP's FileSystemReader with both reads restricted: the index to DCP's own metadata classes
and the few torch and pathlib types they hold, the entries to what `weights_only=True` allows.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

INDEX_FILE = ".metadata"  # DCP's index of which file holds which tensor chunk

# What DCP's index pickles (torch 2.4 to 2.13): its metadata dataclasses, the storage info of FileSystemWriter, and
# the torch and pathlib values inside them. Each is built from plain values; none runs a command or opens a file.
_INDEX_GLOBALS = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "MetadataIndex", "ChunkStorageMetadata",
                                              "TensorStorageMetadata", "BytesStorageMetadata", "TensorProperties",
                                              "StorageMeta", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size", "device"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class ForeignIndex(Exception):
    """A `.metadata` that names Python objects DCP never writes there: gptlab does not unpickle it."""


class _IndexUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = name in _INDEX_GLOBALS.get(module, ()) or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype))
        if not allowed:
            raise ForeignIndex(f"it names {module}.{name}, which torch.distributed.checkpoint never writes there "
                               "(gptlab does not unpickle it: a file from elsewhere could run code)")
        return super().find_class(module, name)


def read_index(index_file: Path) -> Metadata:
    """A sharded checkpoint's `.metadata`. Raises ForeignIndex for a foreign object, and pickle's own errors
    (EOFError, UnpicklingError...) for a truncated or garbled file."""
    with open(index_file, "rb") as f:
        metadata = _IndexUnpickler(f).load()
    if not isinstance(metadata, Metadata):
        raise ForeignIndex(f"it holds a {type(metadata).__name__}, not torch.distributed.checkpoint's Metadata")
    return metadata


class _WeightsOnlyBytes:
    """A DCP load planner whose non-tensor entries are read with weights_only=True (the planner's own load_bytes
    gets them re-saved, so it sets them where they belong as before)."""

    def __init__(self, planner: Any) -> None:
        self._planner = planner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._planner, name)

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        checked = io.BytesIO()
        torch.save(torch.load(value, map_location="cpu", weights_only=True), checked)
        checked.seek(0)
        self._planner.load_bytes(read_item, checked)


class SafeReader(FileSystemReader):
    """DCP's FileSystemReader, reading the index with `read_index` and the non-tensor entries weights-only."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")  # DCP names a per-rank index __<rank>.metadata
        metadata = read_index(Path(self.path) / (INDEX_FILE if rank is None else f"__{rank}{INDEX_FILE}"))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def read_data(self, plan: Any, planner: Any) -> Any:
        return super().read_data(plan, _WeightsOnlyBytes(planner))
