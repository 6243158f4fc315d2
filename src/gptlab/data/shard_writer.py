"""Cut the stream of encoded batches into shards and record, after each cut, how far the input is in shards.

Both splits are cut at the same batch boundary, when either holds `shard_tokens`; `progress.json` then records the
batches its shards cover, the point a killed run resumes from. Tokens go to the open shard files as they arrive,
so the writer holds one batch at a time whatever the shard size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gptlab.atomic import atomic_write_text
from gptlab.data.shards import ShardFile
from gptlab.data.split import SPLITS, Encoded
from gptlab.data.tokenizers import Tokenizer

PROGRESS = "progress.json"


class ShardWriter:
    def __init__(self, out: Path, key: dict[str, Any], tokenizer: Tokenizer, shard_tokens: int, state: dict) -> None:
        self.out, self.key, self.tokenizer, self.shard_tokens, self.state = out, key, tokenizer, shard_tokens, state
        self.open: dict[str, ShardFile] = {}

    def add(self, encoded: Encoded) -> None:
        for split, (ids, n_docs) in encoded.items():
            if split not in self.open:
                name = f"{split}_{len(self.state['shards'][split]):06d}.bin"
                tok = self.tokenizer
                self.open[split] = ShardFile(self.out / name, tok.name, tok.vocab_size, tok.eot_id)
            self.open[split].append(ids, n_docs)
        self.state["batches_done"] += 1
        if any(f.header.n_tokens >= self.shard_tokens for f in self.open.values()):
            self.cut()

    def cut(self) -> None:
        """Rename both splits' open shards into place, then write the progress that covers them."""
        for split in SPLITS:
            shard = self.open.pop(split, None)
            if shard is not None:
                sha = shard.commit()
                self.state["shards"][split].append({"file": shard.target.path.name, "tokens": shard.header.n_tokens,
                                                    "documents": shard.header.n_documents, "sha256": sha})
        atomic_write_text(self.out / PROGRESS, json.dumps({"key": self.key, **self.state}, indent=1))

    def discard(self) -> None:
        """Remove the open shards' temp files (a run stopped by an exception); the committed ones stay."""
        for shard in self.open.values():
            shard.discard()
        self.open = {}
