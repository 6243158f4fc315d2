"""Hydra's compose errors as one line that names the key and the one meant: difflib's closest known key, the
option meant for a group, the new name of a renamed key, the type a value must have."""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError, OmegaConfBaseException, ValidationError

# Keys that moved, old -> new: the old name is refused naming the new one.
RENAMED = {
    "model.compile": "runtime.compile",
    "model.activation_checkpointing": "runtime.activation_checkpointing",
}


def closest(word: str, candidates: Iterable[str]) -> Optional[str]:
    """The candidate nearest `word` by difflib's ratio (0.6, its default cutoff), or None."""
    found = difflib.get_close_matches(word, [str(c) for c in candidates], n=1)
    return found[0] if found else None


def did_you_mean(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    match = closest(word, candidates)
    return f" Did you mean {prefix}{match}?" if match else ""


def renamed(full_key: str) -> Optional[str]:
    new = RENAMED.get(full_key)
    if new is None:
        return None
    return (f"{full_key} is now {new} (how the model runs is the trainer's choice, not the architecture's): "
            f"use {new}=... instead.")


def unknown_key(full_key: str, known: Iterable[str], extra: str = "", target: Optional[str] = None,
                candidates: Iterable[str] = ()) -> str:
    """The message for a key a node does not have: the closest of its keys (and of its constructor's arguments,
    `candidates`), and the keys it has."""
    moved = renamed(full_key)
    if moved:
        return moved
    parent, _, key = full_key.rpartition(".")
    prefix = f"{parent}." if parent else ""
    known = sorted(str(k) for k in known if parent or k != "hydra")  # Hydra's own node is not the user's
    if target:
        what = f"{full_key} is not an argument of {target}."
    else:
        what = f"{full_key} is not a key of {parent or 'the top level of the config'}."
    if not known and not candidates:
        return f"{what[:-1]}, which takes no keys here; drop it."
    hint = extra or did_you_mean(key, [*known, *candidates], prefix) or f" Drop {full_key}: nothing reads it."
    if target and closest(key, [*known, *candidates]) in known:  # typed with `+`, as keys the node lacks must be
        hint += " Type it without +."
    return f"{what}{hint} Its keys: {', '.join(known)}."


def already_a_key(key: str, typed: str) -> str:
    """`+key=value` for a key the config has: `+` adds a key, and `key=value` sets one."""
    return f"{key} is already a key of the config, and + adds a key it lacks: type {typed.lstrip('+')} without the +."


def describe(hint: Any) -> str:
    """A type annotation as a user reads it: 'an integer or null'."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else describe(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is list or hint is list:
        args = typing.get_args(hint)
        plural = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}
        return f"a list of {plural.get(args[0], 'values')}, e.g. [a, b]" if args else "a list, e.g. [a, b]"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def wrong_type(err: ValidationError) -> str:
    """A value of the wrong type, worded as the field's own check words it (its range too), else by its type."""
    schema, key, value = err.object_type, str(err.key), err.value
    own = own_check_message(schema, key, str(err.full_key), value)
    if own:
        return own
    hint = typing.get_type_hints(schema).get(key) if isinstance(schema, type) else None
    wanted = f"use {describe(hint)}" if hint is not None else first_line(err.msg)
    return f"{err.full_key}={value!r} is invalid: {wanted}."


def own_check_message(schema: Any, key: str, full_key: str, value: Any) -> Optional[str]:
    """The message the field's declared range check (GPTConfig's too) gives `value`, if it refuses it."""
    from gptlab.config.fields import check_of
    from gptlab.errors import ConfigError

    try:
        if dataclasses.is_dataclass(schema):
            rule = {f.name: check_of(f) for f in dataclasses.fields(schema)}.get(key)
            if rule is not None:
                rule(full_key, value)
    except ConfigError as refused:
        return str(refused)
    return None


def missing_option(err: MissingConfigException) -> str:
    """`model=nanoo`: the group's option meant, and every option the group has."""
    found = re.search(r"Could not find '([^']+)'", str(err))
    missing = found.group(1) if found else ""
    group, _, option = missing.rpartition("/")
    options = list(err.options or [])
    if not group or not options:
        return first_line(str(err))
    return (f"{group}={option}: conf/{group}/ has no option {option}.{did_you_mean(option, options, f'{group}=')} "
            f"Its options: {', '.join(options)}.")


def first_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def compose_message(err: BaseException) -> Optional[str]:
    """gptlab's one line for an exception Hydra raised while composing, or None when it is not one of them."""
    cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else None
    if isinstance(err, OmegaConfBaseException):
        cause = err
    if isinstance(cause, ConfigKeyError) or (cause is not None and "not in" in str(cause.msg)):
        parent = cause.parent_node
        known = list(parent.keys()) if isinstance(parent, DictConfig) else []
        return unknown_key(str(cause.full_key), known, appendable(parent, str(cause.key), str(cause.full_key)))
    if isinstance(cause, ValidationError):
        return wrong_type(cause)
    if isinstance(cause, ConfigTypeError) and "Cannot merge" in str(cause.msg) and cause.full_key:
        return replaced_node(err, cause)
    if isinstance(err, MissingConfigException):
        return missing_option(err)
    if isinstance(err, ValueError) and "Config group override must be a string" in str(err):
        return group_set_to_null()
    if isinstance(err, ValueError) and str(err).startswith("Expecting one subcommand from"):
        return shell_completion_without_subcommand()
    appended = re.search(r"Could not append to config\. An item is already at '([^']+)'\.\s*Either remove \+ "
                         r"prefix: '([^']*)'", str(err))
    if appended:  # `+seed=3`: Hydra's own line offers `++`, which overrides as plain `seed=3` does
        return already_a_key(appended.group(1), appended.group(2))
    chosen = re.search(r"Multiple values for ([\w/.]+)\. To override a value use 'override [\w/.]+: (.*)'", str(err))
    if chosen:  # `+tokenizer=gpt2` for a group the defaults already choose: Hydra's way out is YAML, not a command
        return (f"{chosen.group(1)} is a config group the config already chooses, and + adds a group it lacks: type "
                f"{chosen.group(1)}={chosen.group(2)} without the +.")
    if isinstance(err, (HydraException, OmegaConfBaseException)):
        return first_line(str(err)) + (f" ({first_line(str(cause))})" if cause is not None and cause is not err
                                       else "")
    return None


def shell_completion_without_subcommand() -> str:
    """`--shell-completion` (-sc) alone: Hydra raises a ValueError (a traceback) for the missing subcommand."""
    script = Path(sys.argv[0]).as_posix() if sys.argv and sys.argv[0] else "src/train.py"
    return (f"--shell-completion needs what to do: `eval \"$(python {script} -sc install=bash)\"` installs "
            "completion in this bash shell (install=fish for fish; uninstall=bash removes it).")


def replaced_node(err: BaseException, cause: ConfigTypeError) -> str:
    """`data.source=[]`: a list typed over a node with keys (or a node over a list), which OmegaConf cannot merge;
    worded by the field's own check where it has one."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    full_key, node = str(cause.full_key), cause.parent_node
    typed = re.search(r"override (\S+)", str(err))
    text = typed.group(1).split("=", 1)[-1] if typed else "?"
    try:
        value = OverridesParser.create().parse_override(f"k={text}").value()
    except Exception:
        value = text
    parent = node._get_parent() if node is not None else None
    own = own_check_message(OmegaConf.get_type(parent), full_key.rsplit(".", 1)[-1], full_key, value) \
        if isinstance(parent, DictConfig) else None
    if own:
        return own
    kind = "a list, e.g. [a,b]" if isinstance(node, ListConfig) else f"a node with keys ({full_key}.<key>=<value>)"
    return f"{full_key}={text} cannot replace {full_key}, which is {kind}; drop it, or give it as such."


def group_set_to_null() -> str:
    """`logger=null` on the command line: Hydra takes a group's option by name and removes a group with `~`."""
    groups = [arg.split("=", 1)[0] for arg in sys.argv[1:] if arg.endswith("=null") and "." not in arg.split("=")[0]]
    group = groups[0] if groups else "<group>"
    return (f"{group}=null: a config group takes the name of one of its options, not null; to run without it, "
            f"remove it with ~{group} (e.g. `python {Path(sys.argv[0]).as_posix()} ~{group}`).")


def appendable(parent: Any, key: str, full_key: str) -> str:
    """For a node that calls a constructor: whether `key` is one of its arguments, to be added with `+`."""
    from gptlab.config.targets import target_parameters

    params = target_parameters(parent) if isinstance(parent, DictConfig) else None
    if params is None or key not in params:
        return ""
    return f" It is an argument of {parent.get('_target_')} that conf/ does not set: add it with +{full_key}=<value>."
