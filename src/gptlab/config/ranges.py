"""Range checks of single values, each `check(field, value)` raising ConfigError that names the field.

Hydra's typed nodes already refuse a wrong type at compose; these say what range or choice a value must have,
and are attached to schema fields (`metadata["check"]`) beside the field they constrain. Hand-written because
OmegaConf has no validators and pydantic would be a second schema system beside Hydra's dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gptlab.errors import ConfigError, is_int, is_number
from gptlab.fields import (  # noqa: F401  (at the base: GPTConfig's checks and scripts' arguments use them too)
    Check,
    boolean,
    choice,
    fail,
    integer,
    non_negative_int,
    number,
    optional,
    positive_int,
    seed,
    text,
    writable_dir,
)
from gptlab.metrics import LOGGED, PER_SOURCE, is_logged


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




def check_table(prefix: str, node: Any, table: dict[str, Check]) -> None:
    """Each key of `node` that `table` knows, checked (for the few top-level options of scripts that have no
    schema: sample.py's)."""
    if not node:
        return
    for key, value in node.items():
        if key in table:
            table[key](f"{prefix}{key}", value)

