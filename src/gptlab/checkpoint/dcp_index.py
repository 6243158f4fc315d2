"""Reading a sharded checkpoint without running pickled code. torch.distributed.checkpoint writes its `.metadata`
index with pickle and reads it back with a plain `pickle.load`, and it loads the non-tensor entries of the shards
(optimizer param groups, loop counters) with `torch.load(weights_only=False)`: a folder from elsewhere could run
anything. `read_index` reads the index restricted to DCP's own metadata classes and the few torch and pathlib types they
hold; gptlab.checkpoint.dcp_reader.SafeReader reads the shards with it. This module imports no part of
torch.distributed.checkpoint at its top (importing that package costs seconds), so the config checks that name
INDEX_FILE start fast.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

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


def read_index(index_file: Path) -> Any:
    """A sharded checkpoint's `.metadata` (DCP's Metadata). Raises ForeignIndex for a foreign object, and pickle's
    own errors (EOFError, UnpicklingError...) for a truncated or garbled file."""
    from torch.distributed.checkpoint.metadata import Metadata

    with open(index_file, "rb") as f:
        metadata = _IndexUnpickler(f).load()
    if not isinstance(metadata, Metadata):
        raise ForeignIndex(f"it holds a {type(metadata).__name__}, not torch.distributed.checkpoint's Metadata")
    return metadata
