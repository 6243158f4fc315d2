"""`setting(...)`: a schema field with its one line of documentation and its range check, declared together.

At the base so that every schema declares its fields alike: config/'s (checked after Hydra composed the config,
gptlab.config.validate) and the model's GPTConfig (checked when it is built, `check_declared`)."""

from __future__ import annotations

import copy
from dataclasses import Field, field, fields, is_dataclass
from typing import Any, Callable, Optional

from gptlab.errors import ConfigError, is_number

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
