"""One line on why torch.load could not read a file, in place of torch's own paragraphs.

torch's weights_only error is a paragraph on its 2.6 default change and on re-running with weights_only=False
(which gptlab never does: a checkpoint from elsewhere must not run code), and its zip errors go on about miniz;
a user needs to know whether the file is not a checkpoint at all, cut short, or holds objects gptlab refuses.
"""

from __future__ import annotations

import re
from pathlib import Path

ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since 1.6
PICKLE_PROTOCOL_2_PLUS = b"\x80"  # the legacy torch.save format and plain pickles start with PROTO


def unreadable_reason(path: Path, err: BaseException) -> str:
    """What is wrong with `path`, given the exception torch.load raised for it, in one short clause."""
    with open(path, "rb") as f:
        head = f.read(64)
    if not head.startswith((ZIP_MAGIC, PICKLE_PROTOCOL_2_PLUS)):
        shown = head[:24].decode("utf-8", "replace").splitlines()[0] if head.strip() else repr(head[:8])
        return f"not a PyTorch checkpoint: it starts with {shown!r}"
    return load_error_reason(err)


def load_error_reason(err: BaseException) -> str:
    """The clause for an exception torch.load raised: foreign objects refused, or cut short."""
    text = str(err)
    # torch words it either way: "WeightsUnpickler error: ..." or, for a blocked module (posix.system), "Trying to ..."
    detail = re.search(r"WeightsUnpickler error:\s*(.+)", text) or re.search(r"^(Trying to load .+)$", text, re.M)
    if detail:
        return (f"it holds Python objects that gptlab does not unpickle (weights_only=True: a file from elsewhere "
                f"runs no code): {detail.group(1).strip()[:120]}")
    first = (text.strip().splitlines() or [type(err).__name__])[0]
    return f"truncated or corrupt: {re.split(r'(?<=[.]) ', first, maxsplit=1)[0][:200]}"  # torch's first sentence
