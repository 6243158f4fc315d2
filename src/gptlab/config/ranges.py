"""Range checks of single values, each `check(field, value)` raising ConfigError that names the field.

Hydra's typed nodes already refuse a wrong type at compose; these say what range or choice a value must have,
and are attached to schema fields (`metadata["check"]`) beside the field they constrain. Hand-written because
OmegaConf has no validators and pydantic would be a second schema system beside Hydra's dataclasses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from gptlab.errors import ConfigError, is_int, is_number
from gptlab.fields import Check, boolean, fail  # noqa: F401  (at the base: GPTConfig's checks use them too)
from gptlab.metrics import LOGGED, PER_SOURCE, is_logged


def integer(low: Optional[int] = None, high: Optional[int] = None) -> Check:
    def check(field: str, value: Any) -> None:
        if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = f" >= {low}" if high is None else f" in [{low}, {high}]"
            raise fail(field, value, f"use an integer{bounds if low is not None else ''}")

    return check


positive_int = integer(1)
non_negative_int = integer(0)


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


def either(*checks: Check, wanted: str) -> Check:
    def check(field: str, value: Any) -> None:
        for inner in checks:
            try:
                inner(field, value)
                return
            except ConfigError:
                continue
        raise fail(field, value, wanted)

    return check


def text(field: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise fail(field, value, "use a non-empty string")


def writable_dir(field: str, value: Any) -> None:
    """A directory that exists and is writable, or can be created (its nearest existing parent is writable)."""
    text(field, value)
    path = Path(value).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problem = "not writable for this user" if existing.is_dir() else "not a directory"
        instead = Path.home() / path.name
        if instead.exists() and not instead.is_dir():  # e.g. the very file refused: a new name beside it
            instead = instead.with_name(f"{instead.stem}-dir")
        raise ConfigError(f"{field}={value!r} cannot be written: {existing} is {problem}; choose a directory you can "
                          f"write to, e.g. {field}={instead}.")


def logged_metric(field: str, value: Any) -> None:
    """A metric name that training logs (gptlab.metrics): a misspelt one is refused before any step is run."""
    text(field, value)
    if not is_logged(value):
        raise fail(field, value, f"use a metric training logs: {', '.join(LOGGED)}, or "
                                 f"{' / '.join(p + '<source>' for p in PER_SOURCE)} for a mixture's source")


def node_with_target(example: str, see: str) -> Check:
    """A config node Hydra instantiates: a mapping that names its class in _target_. The message's example is
    quoted for the shell, which would split it at a space and brace-expand it at a comma."""
    def check(field: str, value: Any) -> None:
        if not (isinstance(value, Mapping) and value.get("_target_")):
            raise ConfigError(f"{field}={value!r} is not a node with _target_: give one, e.g. "
                              f"'{field}={{_target_:{example}}}' (see {see}).")

    return check


def betas(field: str, value: Any) -> None:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(is_number(b) and 0 <= b < 1 for b in value):
        raise fail(field, value, "use two numbers in [0, 1), e.g. [0.9, 0.95]")


def stage_values(example: str) -> Check:
    """A schedule over training (gptlab.train.stages): one positive integer per equal stage of the run."""
    def check(field: str, value: Any) -> None:
        if not isinstance(value, (list, tuple)) or not value or not all(is_int(v) and v >= 1 for v in value):
            raise fail(field, value, f"use a list of whole numbers >= 1, one per equal stage of the run, e.g. "
                                     f"{example}")

    return check


def float8_layers(field: str, value: Any) -> None:
    kinds = ("attention", "mlp", "head")  # gptlab.execution.float8.LAYERS, which imports torch
    if not isinstance(value, (list, tuple)) or not value or not all(v in kinds for v in value) \
            or len(set(value)) != len(value):
        raise fail(field, value, f"use a list of distinct kinds from {', '.join(kinds)}, e.g. {field}=[mlp,head]")


def list_of_text(field: str, value: Any) -> None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise fail(field, value, "use a list of strings")


positive_int = integer(1)
non_negative_int = integer(0)
seed = integer(0, 2**32 - 1)


def check_table(prefix: str, node: Any, table: dict[str, Check]) -> None:
    """Each key of `node` that `table` knows, checked (for the few top-level options of scripts that have no
    schema: sample.py's)."""
    if not node:
        return
    for key, value in node.items():
        if key in table:
            table[key](f"{prefix}{key}", value)
