"""Per-token document ids of packed windows, for data.document_masking.

Every store joins documents as `doc, end-of-text, doc, end-of-text, ...` (gptlab.data.split, streaming), so a
window's documents are found from its tokens alone: the end-of-text closes the document it follows, and the next
token starts a new one. The first document of a window may be the tail of one that began in an earlier window:
it is a document of its own here, with positions from 0, as it would be in a window of its own.
"""

from __future__ import annotations

from typing import Any

import torch

from gptlab.errors import ConfigError


def document_ids(x: torch.Tensor, eot_id: int) -> torch.Tensor:
    """(B, T) int32: how many end-of-text tokens come strictly before each token of its row."""
    ends = (x == eot_id).to(torch.int32)
    return ends.cumsum(dim=-1, dtype=torch.int32) - ends


def masking_eot_id(tokenizer: Any) -> int:
    """The end-of-text id that separates documents; refuses a tokenizer without one. Every store joins a corpus's
    documents with it, so a run needs it with or without data.document_masking."""
    eot = getattr(tokenizer, "eot_id", None)
    if not isinstance(eot, int) or isinstance(eot, bool):
        raise ConfigError(
            f"gptlab joins a corpus's documents with the tokenizer's end-of-text token (eot_id), for "
            f"data.document_masking too, and {getattr(tokenizer, 'name', type(tokenizer).__name__)!r} has none "
            f"(eot_id={eot!r}); use a tokenizer that has one (every tokenizer= of conf/tokenizer/ does: "
            "tokenizer=bytes, tokenizer=gpt2, ...)."
        )
    return eot
