"""What a streamed run's token stream is made of, saved beside its stream position: a position (record index and
token offset per worker) means nothing over other files, another tokenizer or another window size, so a resume
whose stream differs is refused, as a prepared run's is over rebuilt tokens (stores.check_same_tokens).

It costs a stat per source file, never a read: a streamed corpus can be terabytes. Size and modification time are
what source_files compares for a prepared cache too; a Hub dataset is known by its name, config and split only.
"""

from __future__ import annotations

from typing import Any

from gptlab.data.prepare import tokenizer_identity
from gptlab.data.source_files import changes, file_identity
from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError


def stream_identity(source: Any, tokenizer: Tokenizer, block_size: int, val_fraction: float) -> dict[str, Any]:
    described = {k: v for k, v in source.describe().items() if k != "files"}  # text_files' files: below, with stats
    return {"source": described, "files": file_identity(source), "tokenizer": tokenizer_identity(tokenizer),
            "block_size": block_size, "val_fraction": val_fraction}


def stream_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs, one phrase each (the files by name, the settings by their fields)."""
    out = changes(saved["files"], now["files"])
    if saved["source"] != now["source"]:
        out.append(f"the source was {saved['source']}, now {now['source']}")
    if saved["tokenizer"] != now["tokenizer"]:
        out.append(f"the tokenizer was {saved['tokenizer']['name']!r}, now {now['tokenizer']['name']!r}"
                   if saved["tokenizer"]["name"] != now["tokenizer"]["name"] else "the tokenizer encodes differently")
    for field in ("block_size", "val_fraction"):
        if saved[field] != now[field]:
            out.append(f"data.{field} was {saved[field]}, now {now[field]}")
    return out


def check_same_stream(saved: dict[str, Any], now: dict[str, Any]) -> None:
    changed = stream_changes(saved, now)
    if changed:
        raise ConfigError(
            "the checkpoint's stream position (data.store=streaming) was saved over another token stream than this "
            f"run reads: {'; '.join(changed)}. Continuing would read other text from the saved position. Restore "
            "the source and settings as they were (the same files, sizes and modification times) to continue this "
            "run; or start over on the new data with resume=restart, or with a new hydra.run.dir."
        )
