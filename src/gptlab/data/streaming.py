"""Tokenize on the fly from a streamed `datasets.IterableDataset` and pack into block_size+1 windows.

Ranks get disjoint parts through `datasets.distributed.split_dataset_by_node`; DataLoader workers get disjoint
shards from `datasets` itself. Each window carries the position where the next window of its worker starts
(pass, record index, token offset in that record), so a checkpoint can hold the stream's position and a
resumed run continues from it instead of from the beginning.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator, Optional

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from gptlab.data.split import is_val
from gptlab.data.tokenizers import Tokenizer

Position = tuple[int, int, int]  # (pass over the data, record index in this worker's stream, token offset)


class StreamingWindows(IterableDataset):
    """Consecutive windows with stride block_size (each token is a target once), over the train or val
    documents (the same hash split as prepared shards). Train streams repeat pass after pass; val stops after
    `max_windows`. Items are (x, y, position) with position = [worker, pass, record, offset]."""

    def __init__(
        self,
        source: Any,
        tokenizer: Tokenizer,
        block_size: int,
        val_fraction: float,
        val: bool = False,
        rank: int = 0,
        world_size: int = 1,
        start: Optional[dict[int, Position]] = None,
        max_windows: Optional[int] = None,
    ) -> None:
        self.source, self.tokenizer, self.block_size = source, tokenizer, block_size
        self.val_fraction, self.val = val_fraction, val
        self.rank, self.world_size, self.start, self.max_windows = rank, world_size, dict(start or {}), max_windows

    def _texts(self) -> Iterator[str]:
        ds = self.source.streaming_dataset()
        if self.world_size > 1:
            from datasets.distributed import split_dataset_by_node

            ds = split_dataset_by_node(ds, rank=self.rank, world_size=self.world_size)
        return self.source.texts(ds)  # inside a DataLoader worker, `datasets` keeps only that worker's shards

    def _pass(self, skip_records: int, skip_tokens: int) -> Iterator[tuple[np.ndarray, tuple[int, int]]]:
        eot = np.array([self.tokenizer.eot_id], dtype=np.uint32)
        encode = getattr(self.tokenizer, "encode_array", self.tokenizer.encode)
        buf = np.empty(0, dtype=np.uint32)
        held: deque[list[int]] = deque()  # per buffered record: [index, offset of its first buffered token, count]
        for index, text in enumerate(self._texts()):
            if index < skip_records or not text or is_val(text, self.val_fraction) != self.val:
                continue  # records before the resume point are read past, not tokenized
            ids = np.concatenate([np.asarray(encode(text), dtype=np.uint32), eot])
            offset = skip_tokens if index == skip_records else 0
            held.append([index, offset, len(ids) - offset])
            buf = np.concatenate([buf, ids[offset:]])
            while len(buf) >= self.block_size + 1:
                window, buf = buf[: self.block_size + 1], buf[self.block_size :]
                advance = self.block_size
                while advance:
                    take = min(advance, held[0][2])
                    held[0][1] += take
                    held[0][2] -= take
                    advance -= take
                    if held[0][2] == 0:
                        held.popleft()
                yield window, (held[0][0], held[0][1])

    def one_pass(self) -> Iterator[np.ndarray]:
        """The windows of one pass from the start (a train stream repeats its passes without end)."""
        return (window for window, _ in self._pass(0, 0))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        pass_, record, offset = self.start.get(worker, (0, 0, 0))
        emitted = 0
        while True:
            produced = 0
            for window, (record_next, offset_next) in self._pass(record, offset):
                w = torch.from_numpy(window.astype(np.int64))
                yield w[:-1], w[1:], torch.tensor([worker, pass_, record_next, offset_next])
                produced += 1
                emitted += 1
                if self.max_windows is not None and emitted >= self.max_windows:
                    return
            if self.val or (produced == 0 and record == 0):
                return  # val reads one pass; a worker whose share is empty stops (the DataModule checks not all are)
            pass_, record, offset = pass_ + 1, 0, 0
