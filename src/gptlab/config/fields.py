"""`setting(...)`: a schema field with its one line of documentation and its range check, declared together."""

from __future__ import annotations

import copy
from dataclasses import Field, field, fields, is_dataclass
from typing import Any, Optional

from gptlab.config.ranges import Check


def setting(default: Any = "???", help: str = "", check: Optional[Check] = None) -> Any:
    """A dataclass field documented by `help` (the reference page and the YAML comments are tested against it)
    and range-checked by `check(field, value)` after Hydra composed the config (Hydra checks the type).
    No default is OmegaConf's "???": a value the YAML must give (a dataclass default would have to come last)."""
    meta = {"help": help, "check": check}
    if isinstance(default, (list, dict)) or is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def schema_fields(schema: type) -> dict[str, Field]:
    """A schema's fields by name (`_target_` and `_partial_` included)."""
    assert is_dataclass(schema), schema
    return {f.name: f for f in fields(schema)}


def help_of(f: Field) -> str:
    return f.metadata.get("help", "")


def check_of(f: Field) -> Optional[Check]:
    return f.metadata.get("check")
