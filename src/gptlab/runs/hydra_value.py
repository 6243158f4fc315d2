"""One quoting for every command line gptlab prints (continue lines, resume hints): a path as a Hydra override
value. Alone in its file so that the entry scripts' error path reaches it without importing torch."""

from __future__ import annotations

import re


def hydra_value(text: str) -> str:
    """`text` as a Hydra override value: quoted where Hydra's grammar would read a character of it as syntax
    (`=`, `,`, spaces, brackets, ...), e.g. a sweep job dir named `model.norm=post`."""
    if re.fullmatch(r"[\w./@%+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
