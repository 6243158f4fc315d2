"""One way for every script in scripts/ to take its arguments: argparse, each value checked by the range checks the
config's keys use (gptlab.fields), so `--steps -1` is refused as `trainer.max_steps=-1` is: one `gptlab: error:`
line naming the option, its range and a value that works, exit 2, before the script imports torch or creates
anything. This module imports no torch for that reason (the device check imports it when a device is given)."""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

from gptlab import fields
from gptlab.errors import ConfigError
from gptlab.fields import Check


class Arg:
    """An argparse `type=`: the text is kept while argparse parses, then converted by `convert` and refused by
    `check` (`check(field, value)`, as the config's fields declare it) once the option's name is known, so the
    message names it; argparse's own types see the text alone. Text that does not convert is refused by the check
    in its own words ("use an integer >= 1"), not as argparse's "invalid int value"."""

    def __init__(self, convert: Callable[[str], Any], check: Check, example: Optional[str] = None) -> None:
        self.convert, self.check, self.example = convert, check, example
        self.__name__ = getattr(convert, "__name__", "value")  # argparse's help and errors name a type by it

    def e_g(self, example: str) -> Arg:
        """The same argument with a value to offer in its refusal, for an option whose default is None."""
        return Arg(self.convert, self.check, example)

    def __call__(self, text: str) -> str:
        return text

    def value(self, field: str, given: Any) -> Any:
        """The converted value, or the check's refusal, worded with the text as typed (`--alpha='2'`, not 2.0)."""
        if not isinstance(given, str):  # a default
            self.check(field, given)
            return given
        try:
            value = self.convert(given)
        except (TypeError, ValueError):
            value = given
        try:
            self.check(field, value)
        except ConfigError:
            self.check(field, given)  # the same check on the text: the same words, the value as typed
            raise
        return value


def integer(low: Optional[int] = None, high: Optional[int] = None) -> Arg:
    return Arg(int, fields.integer(low, high))


def number(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = False) -> Arg:
    """A finite number in the interval (NaN and inf are refused)."""
    return Arg(float, fields.number(low, high, low_open, high_open))


positive_int = integer(1)
non_negative_int = integer(0)
seed = Arg(int, fields.seed)
positive_number = number(0.0, low_open=True)
probability = number(0.0, 1.0, low_open=True, high_open=True)  # a significance level, a share


def _existing_dir(field: str, value: Any) -> None:
    path = Path(value)
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"{field}={str(value)!r} is a file, not a directory; give a directory, e.g. "
                          f"{field}={path.parent}.")
    raise ConfigError(f"{field}={str(value)!r} does not exist; create it first (mkdir -p {path}) or give an existing "
                      "directory.")


def _writable_dir(field: str, value: Any) -> None:
    fields.writable_dir(field, str(value))


def _writable_file(field: str, value: Any) -> None:
    """A file to write: its dir must exist or be creatable, and take files; checked before the work that fills it."""
    path = Path(value).absolute()
    try:
        fields.writable_dir(field, str(path.parent))
    except ConfigError:
        raise ConfigError(f"{field}={str(value)!r} cannot be written: {path.parent} is not a directory this user can "
                          f"write to; give a path in one, e.g. {field}={Path.home() / path.name}.") from None


def _tokenizer(field: str, value: Any) -> None:
    """bytes, or a tiktoken encoding whose ranks are here or can be downloaded: refused before a corpus is made."""
    from gptlab.data.tokenizers import ENCODINGS, TiktokenTokenizer

    fields.choice("bytes", *ENCODINGS)(field, value)
    if value != "bytes":
        try:
            TiktokenTokenizer(value)
        except ConfigError as err:
            raise ConfigError(f"{field}={value!r} needs its BPE ranks, which are not in data/cache/tiktoken and could "
                              "not be downloaded; `python scripts/fetch_gpt2_ranks.py` fetches gpt2's (and "
                              f"r50k_base's) there, or use {field}=bytes.") from err


def _device(field: str, value: Any) -> None:
    """Every machine has the cpu (the scripts' default), so only another device imports torch to be checked."""
    if value == "cpu":
        return
    from gptlab.preflight.devices import check_device

    check_device(field, value)


existing_dir = Arg(Path, _existing_dir)  # a dir the script reads from or puts its runs in
writable_dir = Arg(Path, _writable_dir)  # a dir that exists and is writable, or can be created
writable_file = Arg(Path, _writable_file)  # a file to write (whether one may be replaced: runs.write_targets)
device = Arg(str, _device)  # a torch device this machine has: cpu, cuda, cuda:<i>, mps
tokenizer = Arg(str, _tokenizer)  # bytes, or a tiktoken encoding with its ranks at hand


def option_name(action: argparse.Action) -> str:
    """How the user types the option: its long form (`--steps`), or a positional's name."""
    longs = [s for s in action.option_strings if s.startswith("--")]
    return (longs or action.option_strings or [str(action.metavar or action.dest)])[0]


def with_example(message: str, action: argparse.Action) -> str:
    """A range refusal completed by the option's default (else its Arg's example, or its first choice): a value
    that works when typed."""
    default = action.default
    example = getattr(action.type, "example", None) or (str(list(action.choices)[0]) if action.choices else None)
    if " is invalid: " not in message or not action.option_strings or isinstance(default, bool) or \
            default is None and example is None:
        return message
    if default is None:
        return f"{message.rstrip('.')}, e.g. {option_name(action)}={example}."
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
    joiner = " " if isinstance(default, (list, tuple)) else "="
    return f"{message.rstrip('.')}, e.g. {option_name(action)}{joiner}{shown} (the default)."


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose refusals are gptlab's one line (`gptlab: error: ...`, exit 2) in the config's words,
    instead of argparse's usage block and `<prog>: error:` line; options typed with an `Arg` are range-checked."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            given = getattr(namespace, action.dest, None)
            if not isinstance(action.type, Arg) or given is None:
                continue
            field = option_name(action)
            try:
                value = [action.type.value(field, v) for v in given] if isinstance(given, list) else \
                    action.type.value(field, given)
            except ConfigError as refused:
                self.refuse(with_example(str(refused), action))
            setattr(namespace, action.dest, value)
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        """argparse's own refusals (a missing argument, an unknown option, a bad choice), in the config's words."""
        choice = re.match(r"argument (\S+?)(?:/\S+)?: invalid choice: (.*) \(choose from (.*)\)$", message)
        if choice:
            refusal = f"{choice.group(1)}={choice.group(2)} is invalid: use one of {choice.group(3)}."
            named = [a for a in self._actions if choice.group(1) in (option_name(a), a.metavar)]
            self.refuse(with_example(refusal, named[0]) if named else refusal)
        unknown = re.match(r"unrecognized arguments: (.*)$", message)
        hint = ""
        if unknown:
            known = [s for a in self._actions for s in a.option_strings]
            typed = [word.split("=")[0] for word in unknown.group(1).split() if word.startswith("-")]
            close = [m for word in typed for m in difflib.get_close_matches(word, known, n=1)]
            hint = f" Did you mean {close[0]}?" if close else ""
        self.refuse(f"{message}.{hint} See `python {Path(sys.argv[0]).as_posix()} --help`.")

    def refuse(self, message: str) -> NoReturn:
        print(f"gptlab: error: {message}", file=sys.stderr)
        sys.exit(2)

