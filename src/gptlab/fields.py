"""`setting(...)`: a schema field with its one line of documentation and its range check, declared together.

At the base so that every schema declares its fields alike: config/'s (checked after Hydra composed the config,
gptlab.config.validate) and the model's GPTConfig (checked when it is built, `check_declared`). The range checks
every layer shares (integer, number, choice, a writable dir) are here too, so that a script's arguments
(gptlab.launch.arguments) are refused in the config's words before torch is imported."""

from __future__ import annotations

import copy
import math
import os
import tempfile
from dataclasses import Field, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from gptlab.errors import ConfigError, is_int, is_number

Check = Callable[[str, Any], None]  # check(field, value) raises ConfigError naming the field, or returns


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


def check_declared(obj: Any, prefix: str) -> None:
    """Each field's declared check, on the value `obj` (a dataclass instance) holds; `prefix` names the group
    (`model.`)."""
    for name, f in schema_fields(type(obj)).items():
        rule = check_of(f)
        if rule is not None:
            rule(f"{prefix}{name}", getattr(obj, name))


def fail(field: str, value: Any, wanted: str) -> ConfigError:
    return ConfigError(f"{field}={value!r} is invalid: {wanted}.")


def boolean(field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise fail(field, value, "use true or false")


def must(holds: Callable[[Any], bool], what: str, number: bool = False) -> Check:
    """A check that refuses a value for which `holds` is false, saying `<field>=<value> must be <what>.`;
    `number`: a value that is no number at all is refused before `holds` compares it (in the same words)."""
    def check(field: str, value: Any) -> None:
        if (number and not is_number(value)) or not holds(value):
            raise ConfigError(f"{field}={value!r} must be {what}.")

    return check


def integer(low: Optional[int] = None, high: Optional[int] = None) -> Check:
    def check(field: str, value: Any) -> None:
        if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = f" >= {low}" if high is None else f" in [{low}, {high}]"
            raise fail(field, value, f"use an integer{bounds if low is not None else ''}")

    return check


positive_int = integer(1)
non_negative_int = integer(0)
seed = integer(0, 2**32 - 1)  # what numpy's and torch's seeding take


def number(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = False) -> Check:
    def check(field: str, value: Any) -> None:
        ok = is_number(value) and (value > low if low_open else value >= low)
        ok = ok and (value < high if high_open else value <= high)
        if not ok:
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
            raise fail(field, value, f"use a number in {interval}")

    return check


def choice(*allowed: Any) -> Check:
    def check(field: str, value: Any) -> None:
        if not any(type(value) is type(a) and value == a for a in allowed):  # 1 is not True, "1" is not 1
            raise fail(field, value, f"use one of {', '.join(repr(a) for a in allowed)}")

    return check


def optional(inner: Check) -> Check:
    def check(field: str, value: Any) -> None:
        if value is not None:
            inner(field, value)

    return check


def text(field: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise fail(field, value, "use a non-empty string")


def _takes_files(directory: Path) -> bool:
    """Whether a file can be made in `directory`: for root, os.access says yes to /proc and /sys, which take none."""
    if os.geteuid() != 0:
        return True
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def writable_dir(field: str, value: Any) -> None:
    """A directory that exists and is writable, or can be created (its nearest existing parent is writable)."""
    text(field, value)
    path = Path(value).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK) or not _takes_files(existing):
        problem = "not writable for this user" if existing.is_dir() else "not a directory"
        instead = Path.home() / path.name
        if instead.exists() and not instead.is_dir():  # e.g. the very file refused: a new name beside it
            instead = instead.with_name(f"{instead.stem}-dir")
        raise ConfigError(f"{field}={value!r} cannot be written: {existing} is {problem}; choose a directory you can "
                          f"write to, e.g. {field}={instead}.")
