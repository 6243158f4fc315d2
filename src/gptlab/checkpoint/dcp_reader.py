"""`SafeReader`: DCP's FileSystemReader with both reads restricted, the index by dcp_index.read_index and the
non-tensor entries of the shards to what `weights_only=True` allows (DCP loads them with weights_only=False)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from gptlab.checkpoint.dcp_index import INDEX_FILE, read_index


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
