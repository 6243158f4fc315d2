"""The suggestion-follower (issue 33, item 2): run train's checks on a command, read the ways out its refusal offers,
type each into the command and run the checks again, as a user would, to a bounded depth.

`refusal(command)` is what `python src/train.py <command>` says before it builds anything: Hydra's compose errors as
gptlab.config.suggest words them, then gptlab.config.validate with the command line's overrides, then
gptlab.preflight.early_checks (what the Hydra callback GuardRunDir and train() run), then the run-dir check of
gptlab.runs.resume. Composing is Hydra's: the group choices by the compose API (cached: ~0.15 s each), the dotted
overrides by Hydra's own ConfigLoaderImpl._apply_overrides_to_config on a copy, which is what compose does with them.

`ways_out(message, command)` reads a message as a user would: a `key=value` that differs from what the command has
is one to type (one that equals it only describes the command); `key=a or b` offers each value; "Drop key" /
"leave key out" drop it; "~group" removes the group;
"Did you mean key?" and "X is now key" rename the typed key; "+key=<value>" appends it;
and a refused field's range ("use an integer >= 1", "must be in [0, 1)", "use one of 'a', 'b'", "e.g. 6.0")
offers a value that the words say is allowed.
"""

from __future__ import annotations

import ast
import functools
import math
import pickle
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional
from unittest import mock

import hydra
import torch
from helpers import CONF_DIR, ROOT, compose_config
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

import gptlab
from gptlab.apps.build import build_run
from gptlab.atomic import atomic_write
from gptlab.config import ladder_steps  # noqa: F401  (registers ${gptlab.ladder_steps:r}, as train does)
from gptlab.config.suggest import compose_message
from gptlab.config.validate import strict_booleans
from gptlab.errors import find_config_error
from gptlab.launch.hydra_callbacks import missing_message, missing_values, unread_appended
from gptlab.model import GPT, GPTConfig
from gptlab.preflight import early_checks
from gptlab.runs.resume import resume_checkpoint

RUN_DIR = Path(tempfile.gettempdir()) / "gptlab-ways-out" / "run"
GROUPS = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
PARSER = OverridesParser.create()


def _defaults() -> dict[str, str]:
    """train.yaml's group choices (`model: nano`), what a command has when it names none."""
    chosen = {}
    for line in (CONF_DIR / "train.yaml").read_text().splitlines():
        found = re.match(r"\s*-\s*([a-z_]+):\s*([\w.]+)", line)
        if found:
            chosen[found.group(1)] = found.group(2)
    return chosen


DEFAULT_CHOICES = _defaults()


def bare(key: str) -> str:
    return key.lstrip("+~")


def key_of(override: str) -> str:
    return bare(override.split("=", 1)[0])


def is_group_override(override: str) -> bool:
    key = key_of(override)
    return ("." not in key and key.split("/")[0] in GROUPS) or key.startswith("hydra")


@functools.cache
def _base(groups: tuple[str, ...], run_dir: str) -> DictConfig:
    """The config the group overrides compose, shared: read it, never change it (base_config gives a copy)."""
    return compose_config([g for g in groups if not key_of(g).startswith("hydra")], Path(run_dir))


@functools.cache
def _pickled_base(groups: tuple[str, ...], run_dir: str) -> bytes:
    return pickle.dumps(_base(groups, run_dir))


def base_config(groups: tuple[str, ...], run_dir: str) -> DictConfig:
    """A fresh copy of the config the group overrides compose, to change: unpickled, ~4x faster than a deepcopy
    (the follower copies one for every command it tries)."""
    return pickle.loads(_pickled_base(groups, run_dir))


def run_dir_of(command: tuple[str, ...]) -> Path:
    """`hydra.run.dir=X` is the run dir the compose API cannot make: the checks get it as paths.output_dir. Without
    one, a run goes under paths.log_dir (conf/hydra/default.yaml: <log_dir>/runs/<name>/<date>/<time>) when the
    command gives one, else to RUN_DIR."""
    given = [o.split("=", 1)[1] for o in command if key_of(o) == "hydra.run.dir"]
    log_dir = [o.split("=", 1)[1] for o in command if key_of(o) == "paths.log_dir"]
    return Path(given[-1]) if given else Path(log_dir[-1]) / "runs" / "train" / "run" if log_dir else RUN_DIR


def compose(command: tuple[str, ...]) -> DictConfig:
    """The config `python src/train.py <command>` composes (raises what Hydra raises); not to be changed."""
    cfg, err = _composed(command)
    if err is not None:
        raise err
    return cfg


@functools.cache
def _composed(command: tuple[str, ...]) -> tuple[Optional[DictConfig], Optional[BaseException]]:
    try:
        return _compose(command), None
    except Exception as err:
        return None, err


def _compose(command: tuple[str, ...]) -> DictConfig:
    parsed = PARSER.parse_overrides(list(command))
    groups = tuple(o for o in command if is_group_override(o))
    cfg = base_config(groups, str(run_dir_of(command)))
    ConfigLoaderImpl._apply_overrides_to_config([p for o, p in zip(command, parsed) if not is_group_override(o)], cfg)
    return cfg


@dataclass(frozen=True)
class Refusal:
    message: str
    site: Optional[tuple[str, int]]  # the file and line of the `raise` (None: Hydra's own compose error)


def _site(err: BaseException) -> Optional[tuple[str, int]]:
    frames = traceback.extract_tb(err.__traceback__)
    return (frames[-1].filename, frames[-1].lineno) if frames else None


@functools.cache
def refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What train says to `command` before building anything (None: it would start). Anything but a user error
    (a gptlab ConfigError, or a compose error gptlab words) propagates: a traceback is a failure of the follower."""
    try:
        cfg = compose(command)
    except Exception as err:
        with mock.patch.object(sys, "argv", ["src/train.py", *command]):  # `group=null`'s words read the command
            message = compose_message(err)
        if message is None:
            raise
        return Refusal(message, None)
    try:
        strict_booleans(cfg, command)  # check() reads the command line from Hydra, which the compose API has not set
        early_checks._check_before_run(cfg)  # uncached: the Hydra callback's and train()'s checks
        resume_checkpoint(cfg, run_dir_of(command), warn=False)
    except Exception as err:
        return as_refusal(err)
    return None


def as_refusal(err: Exception) -> Refusal:
    """The user error inside `err` as the refusal it is, where it was raised; anything else is a bug: raised again."""
    found = find_config_error(err)
    if found is None:
        raise err
    return Refusal(str(found), _site(found))


@functools.cache
def built_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What train says to `command` up to its first step: `refusal`, then what building the run's objects refuses
    (gptlab.apps.build.build_run: the datamodule, model, callbacks, Trainer and batching; ~0.1 s, so only the cases
    that need it use it). The datamodule's setup, which reads the corpus, is not run."""
    first = refusal(command)
    if first is not None:
        return first
    cfg = compose(command)
    try:
        build_run(cfg, early_checks._check_before_run(cfg), None)
    except Exception as err:
        return as_refusal(err)
    return None


# ---- eval.py and sample.py: their own refusals, up to the work (scoring, generating) ---------------------------
APPS = ("eval", "sample")
CKPT = RUN_DIR.parent / "tiny" / "last.ckpt"  # a checkpoint of a 1-layer model trained with tokenizer=bytes


class _Started(Exception):
    """Raised where the app would start its work: everything it refuses has been checked."""


def tiny_checkpoint() -> Path:
    """CKPT, written once: the weights and hyperparameters that eval.py and sample.py read from a run's checkpoint."""
    if not CKPT.is_file():
        node = compose_config([], RUN_DIR.parent / "eval", config_name="eval").tokenizer
        tokenizer = OmegaConf.to_container(node, resolve=True)
        model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=32,
                              vocab_size=hydra.utils.instantiate(node).vocab_size))
        CKPT.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(CKPT, lambda tmp: torch.save(  # whole or absent: another test process may read it meanwhile
            {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
             "hyper_parameters": {"model": model.config.to_dict(), "run": {"tokenizer": tokenizer}}}, tmp))
    return CKPT


@functools.cache
def app_config(app: str) -> DictConfig:
    return compose_config([], RUN_DIR.parent / "eval" if app == "eval" else None, config_name=app)


@functools.cache
def app_keys() -> frozenset[str]:
    """The top-level keys of eval.yaml and sample.yaml, which their refusals name."""
    return frozenset(k for app in APPS for k in app_config(app))


@functools.cache
def app_refusal(app: str, command: tuple[str, ...]) -> Optional[Refusal]:
    """What `python src/<app>.py <command>` says before it scores (eval) or generates (sample); None: it would."""
    from gptlab.apps import context_eval, evaluate
    from gptlab.eval import sampling
    from gptlab.model import generation

    def started(*args: Any, **kwargs: Any) -> None:
        raise _Started

    try:
        cfg = compose_config(list(command), RUN_DIR.parent / "eval" if app == "eval" else None, config_name=app)
    except Exception as err:
        message = compose_message(err)
        if message is None:
            raise
        return Refusal(message, None)
    missing = missing_values(cfg)  # the Hydra callback CheckArguments, before the app
    if missing:
        return Refusal(missing_message(missing, app), None)
    unread = unread_appended(cfg, list(command), {key_of(o) for o in command if is_group_override(o)})
    if unread:
        return Refusal(unread, None)
    try:
        if app == "eval":  # validation, the tasks, or the contexts' scoring (after their checks) start the work
            with mock.patch.object(evaluate, "GPTLitModule", started), \
                    mock.patch.object(evaluate, "evaluate_tasks", started), \
                    mock.patch.object(context_eval, "score_model", started):
                evaluate.evaluate(cfg)
        else:  # the decoding loops: after every check of gptlab.model.generation.generate
            with mock.patch.object(generation, "_sample", started), \
                    mock.patch.object(generation, "_beam_search", started):
                sampling.sample(cfg)
    except _Started:
        return None
    except Exception as err:
        return as_refusal(err)
    raise AssertionError(f"{app} {command} neither refused nor started")


# ---- reading a message -------------------------------------------------------------------------------------------
KEY = r"\+{0,2}[A-Za-z_][\w]*(?:[./][\w]+)*"
PLAIN = r"[^\s,;:?!()\[\]{}'\"]+"
# a plain value may hold colons (budget=tokens:2e6), not end with one
VALUE = rf"(?:<[^>]*>|\[[^\]]*\]|\{{[^}}]*\}}|'[^']*'|\"[^\"]*\"|{PLAIN}(?::{PLAIN})*)"
OR_VALUE = r",?\s+or\s+(?![\w.]*[<>=])[\w.+-]*\w(?=[,.;)]|\s*\(|\s*$)(?:\s*\([^)]*\))?"
TOKEN = re.compile(rf"(?<![\w.+/<-])({KEY})=({VALUE})((?:\s*\([^)]*\))?(?:{OR_VALUE})*)")
ALTERNATIVE = re.compile(r"\bor\s+([\w.+-]*\w)")
PLACEHOLDER = re.compile(r"^(<[^>]*>|\.\.\.)$")


def _known_key(key: str) -> bool:
    top = bare(key).split(".")[0].split("/")[0]
    return top in GROUPS or top in _base((), str(RUN_DIR)) or top == "hydra" or top in app_keys()


def _value(text: str) -> Any:
    """A value as the message wrote it (Python repr or Hydra syntax), parsed as Hydra would read it typed."""
    text = text.rstrip(".")
    try:
        return PARSER.parse_override(f"k={text}").value()
    except Exception:
        return text


def typed(value: Any) -> str:
    """A Python value as a command-line override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(typed(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{typed(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return value if re.fullmatch(r"[A-Za-z_][\w.\-/]*", value) and value not in ("null", "true", "false") \
            else "'" + value.replace("'", "\\'") + "'"
    return repr(value)


def current(command: tuple[str, ...], key: str) -> list[Any]:
    """What `key` is for the command: the value it typed and the composed config's value (for a group, the option
    chosen)."""
    key = bare(key)
    values = [_value(o.split("=", 1)[1]) for o in command if key_of(o) == key and "=" in o]
    if "." not in key and key in GROUPS:
        return values or [DEFAULT_CHOICES.get(key)]
    if key.split(".")[0] not in _base((), str(RUN_DIR)):  # an option of eval.py or sample.py: typed, else default
        return values or [OmegaConf.select(app_config(app), key, default=None, throw_on_missing=False)
                          for app in APPS if key.split(".")[0] in app_config(app)][:1]
    try:
        cfg = compose(command)
    except Exception:
        cfg = _base(tuple(o for o in command if is_group_override(o)), str(run_dir_of(command)))
    try:
        found = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        values.append(OmegaConf.to_container(found, resolve=True) if OmegaConf.is_config(found) else found)
    except Exception:
        pass
    return values


def same(a: Any, b: Any) -> bool:
    return str(a) == str(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def typed_in(command: tuple[str, ...], key: str, value: str) -> tuple[str, ...]:
    """The command with `key=value` typed in: it replaces the same key (keeping a `+`), or is added."""
    name = bare(key)
    for i, o in enumerate(command):
        if key_of(o) == name and not o.startswith("~"):
            prefix = o[: len(o) - len(o.lstrip("+"))] or key[: len(key) - len(name)]
            return (*command[:i], f"{prefix}{name}={value}", *command[i + 1:])
    return (*command, f"{key}={value}")


def dropped(command: tuple[str, ...], key: str) -> Optional[tuple[str, ...]]:
    """The command without the overrides that set `key` or a key under it."""
    kept = tuple(o for o in command if key_of(o) != bare(key) and not key_of(o).startswith(bare(key) + "."))
    return kept if kept != command else None


def renamed(command: tuple[str, ...], override: str, key: str) -> tuple[str, ...]:
    """The command with `override` typed under another key (with the key's `+`, else the override's), its value
    the same."""
    prefix = key[: len(key) - len(key.lstrip("+"))] or override[: len(override) - len(override.lstrip("+"))]
    return tuple(f"{prefix}{bare(key)}={override.split('=', 1)[1]}" if o == override else o for o in command)


@dataclass
class Way:
    said: str  # the words of the message it follows
    command: tuple[str, ...]


@dataclass
class Reading:
    ways: list[Way] = field(default_factory=list)
    unfollowable: list[str] = field(default_factory=list)  # ways the message offers that no test can type
    commands: list[str] = field(default_factory=list)  # `python scripts/x.py ...`: another tool to run first
    untypable: list[str] = field(default_factory=list)  # a shell would split or brace-expand it as written


def refused_key(message: str) -> Optional[str]:
    """The key a message is about: its first words, `key=value ...` or `key is ...`."""
    found = TOKEN.match(message) or re.match(rf"({KEY})[ ,]", message)
    if found and _known_key(found.group(1)):
        return bare(found.group(1))
    return None


def ways_out(message: str, command: tuple[str, ...], stand_ins: Optional[dict[str, str]] = None) -> Reading:
    """Each way out `message` offers, typed into `command` (see the module docstring); `key=<...>` is typed with
    `stand_ins[key]` where it has one (a file the words ask for: a checkpoint, a prompt file)."""
    reading = Reading()
    refused = refused_key(message)
    # "X is now Y" / "X is gone: use Y=v": a key that replaces the refused one, which goes
    replaced = refused if re.match(rf"{KEY} is (?:now|gone)\b", message) else None

    def add(said: str, new: Optional[tuple[str, ...]]) -> None:
        if new is not None and replaced:
            new = dropped(new, replaced) or new
        if new is not None and new != command and all(w.command != new for w in reading.ways):
            reading.ways.append(Way(said, new))

    for span in re.findall(r"`([^`]*)`", message):  # `a=1 b=2`: one way, typed together
        words = span.split()
        if words[:1] == ["python"]:
            reading.commands.append(span)
        if words and all("=" in w and _known_key(w.split("=", 1)[0]) for w in words):
            new = command
            for w in words:
                new = typed_in(new, *w.split("=", 1))
            add(span, new)
    for found in TOKEN.finditer(re.sub(r"`[^`]*`", "", message)):
        key, value, tail = found.groups()
        if not _known_key(key):
            continue
        quoted = found.start() > 0 and found.string[found.start() - 1] in "'\""
        if PLACEHOLDER.match(value):
            before = [o for o in command if key_of(o) == replaced or key_of(o) == bare(key)]
            if stand_ins and bare(key) in stand_ins:
                add(found.group(0), typed_in(command, key, stand_ins[bare(key)]))
            elif before:  # "add it with +trainer.x=<value>", "use runtime.compile=... instead": the value typed before
                add(found.group(0), renamed(command, before[0], key) if key.startswith("+") or replaced else None)
            else:
                reading.unfollowable.append(found.group(0))
            continue
        value = value if PLACEHOLDER.match(value) else value.rstrip(".")
        retyped = [o for o in command if key_of(o) == bare(key) and o.split("=", 1)[0] != key
                   and same(_value(o.split("=", 1)[1]), _value(value))]
        if retyped:  # Hydra's "Either remove + prefix: 'a.b=1'": the same value, typed another way
            add(found.group(0), tuple(f"{key}={value}" if o == retyped[0] else o for o in command))
        for v in [value, *ALTERNATIVE.findall(re.sub(r"\([^)]*\)", "", tail or ""))]:
            v = v.rstrip(".")
            if not any(same(_value(v), now) for now in current(command, key)):
                if not quoted and (" " in v or ("{" in v and "," in v)):
                    reading.untypable.append(found.group(0))
                add(found.group(0), typed_in(command, key, typed(_value(v)) if v.startswith("'") else v))
    for found in re.finditer(rf"\b(?:[Dd]rop|[Ll]eave|[Rr]emove)\s+({KEY})(?!\w)", message):
        if _known_key(found.group(1)) or any(key_of(o) == bare(found.group(1)) for o in command):  # "drop +foo"
            add(found.group(0), dropped(command, found.group(1)))
    for found in re.finditer(rf"(?<![\w.~])~({KEY})", message):  # "remove it with ~logger": the group goes
        if _known_key(found.group(1)):
            add(found.group(0), (*(o for o in command if key_of(o) != bare(found.group(1))), found.group(0)))
    if refused and re.search(r"\b(?:[Dd]rop it|drop the override)\b", message):
        add("drop it", dropped(command, refused))
    misspelt = re.match(rf"({KEY}) is not (?:a key|an argument)", message)
    for found in re.finditer(rf"Did you mean ({KEY})\?( Type it without \+\.)?", message):
        meant, without_plus = found.group(1), bool(found.group(2))
        for o in command:
            if misspelt and key_of(o) == bare(misspelt.group(1)):
                value = o.split("=", 1)[1]
                add(found.group(0), tuple(f"{bare(meant)}={value}" if x == o else x for x in command)
                    if without_plus else renamed(command, o, meant))
    for found in re.finditer(rf"^({KEY}) is now ({KEY})", message):
        for o in command:
            if key_of(o) == bare(found.group(1)):
                add(found.group(0), renamed(command, o, found.group(2)))
    if refused and TOKEN.match(message):
        for said, value in described_values(message):
            add(said, typed_in(command, refused, typed(value)))
    return reading


NUMBER = r"-?(?:\d+(?:\.\d+)?(?:e[+-]?\d+)?|inf)"


def _interval_value(low_open: bool, low: float, high: float, high_open: bool) -> float:
    if not low_open:
        return low
    if not high_open and not math.isinf(high):
        return high
    return (low + high) / 2 if not math.isinf(high) else low + 1


def described_values(message: str) -> list[tuple[str, Any]]:
    """The values a field's refusal describes as allowed, one or two per description."""
    text = message.split(" is invalid: ", 1)[-1] if " is invalid: " in message else message
    found: list[tuple[str, Any]] = []
    for m in re.finditer(r"one of:? ((?:'[^']*'|None|True|False|-?[\d.]+)(?:, (?:'[^']*'|None|True|False|-?[\d.]+))*)",
                         text):
        found += [(m.group(0), ast.literal_eval(v)) for v in re.findall(r"'[^']*'|None|True|False|-?[\d.]+",
                                                                        m.group(1))]
    for m in re.finditer(r"true,? (?:false,? )?or false|true, false\b", text):
        found += [(m.group(0), True), (m.group(0), False)]
    for m in re.finditer(r"\bor null\b", text):
        found.append((m.group(0), None))
    for m in re.finditer(r"\bor (auto|warn|link)\b", text):
        found.append((m.group(0), m.group(1)))
    for m in re.finditer(rf"integer >= ({NUMBER})", text):
        found.append((m.group(0), int(m.group(1))))
    for m in re.finditer(rf"integer in \[({NUMBER}), ({NUMBER})\]", text):
        found.append((m.group(0), int(m.group(1))))
    for m in re.finditer(r"positive integer", text):
        found.append((m.group(0), 1))
    for m in re.finditer(rf"(?:number|fraction|be) in ([\[(])({NUMBER}), ({NUMBER})([\])])", text):
        low, high = float(m.group(2)), float(m.group(3))
        found.append((m.group(0), _interval_value(m.group(1) == "(", low, high, m.group(4) == ")")))
    for m in re.finditer(rf"number >= ({NUMBER})", text):
        found.append((m.group(0), float(m.group(1))))
    for m in re.finditer(rf"number > ({NUMBER})", text):
        found.append((m.group(0), float(m.group(1)) + 1))
    for m in re.finditer(r"positive number", text):
        found.append((m.group(0), 1.0))
    for m in re.finditer(r"e\.g\. (\[[^\]]*\]|[\w.]+(?![\w.]*=))", text):  # not "e.g. key=value": a way of its own
        found.append((m.group(0), _value(m.group(1))))
    for m in re.finditer(r"non-empty string", text):
        found.append((m.group(0), "x"))
    for m in re.finditer(r"list of strings", text):
        found.append((m.group(0), ["x"]))
    for m in re.finditer(r"use -1\b", text):
        found.append((m.group(0), -1))
    for m in re.finditer(r"a metric training logs: ([\w/]+)", text):
        found.append((m.group(0), m.group(1)))
    return found


# ---- following ---------------------------------------------------------------------------------------------------
@dataclass
class Walk:
    broken: list[str] = field(default_factory=list)  # what went wrong, one line each
    followed: int = 0


def follow(command: tuple[str, ...], depth: int = 3, walk: Optional[Walk] = None, seen: Optional[set] = None,
           history: tuple[str, ...] = (), refuse: Callable[[tuple[str, ...]], Optional[Refusal]] = refusal,
           stand_ins: Optional[dict[str, str]] = None) -> Walk:
    """Follow every way out of `command`'s refusal (by `refuse`: `refusal`, or `built_refusal`); each must lead to a
    command that passes, or is refused with a new message whose first way out is followed in turn, `depth` refusals
    deep (every way out of that message is followed by the case that refuses it first: each refusal has one);
    `stand_ins` as for `ways_out`."""
    walk = Walk() if walk is None else walk
    seen = set() if seen is None else seen
    refused = refuse(command)
    if refused is None or command in seen:
        return walk
    seen.add(command)
    path = " -> ".join((*history, " ".join(command)))
    if depth == 0:
        walk.broken.append(f"still refused after following its ways out: {path}: {refused.message}")
        return walk
    reading = ways_out(refused.message, command, stand_ins)
    for said in reading.untypable:
        walk.broken.append(f"{refused.message!r} offers {said!r}, which a shell splits or brace-expands: quote it")
    for tool in reading.commands:  # run by its own tests (fetch, plan); here it must exist
        if not (ROOT / tool.split()[1]).is_file():
            walk.broken.append(f"{refused.message!r} names a command whose script is not there: {tool}")
    if not reading.ways and not reading.commands:
        walk.broken.append(f"no way out to type in {refused.message!r} (for {path})"
                           + (f"; offers only {reading.unfollowable}" if reading.unfollowable else ""))
        return walk
    for way in reading.ways if not history else reading.ways[:1]:
        walk.followed += 1
        again = refuse(way.command)
        if again is not None and again.message == refused.message:
            walk.broken.append(f"following {way.said!r} ({' '.join(way.command)}) gives the same refusal: "
                               f"{refused.message}")
            continue
        follow(way.command, depth - 1, walk, seen, (*history, " ".join(command)), refuse, stand_ins)
    return walk


# ---- which `raise` each follower test must reach -----------------------------------------------------------------
SRC = Path(gptlab.__file__).parent
RAISED = {"ConfigError", "DiskFullError", "fail", "invalid_choice"}  # the user errors an entry point prints, exit 2
# Every module of gptlab that raises a user error, by the test file whose cases reach each of its raises (or excuse
# one, saying why no command on this machine reaches it). A module that starts raising one joins an area here.
AREAS = {
    # train's command line: the config and machine checks, building the run
    "test_ways_out.py": [
        "config/validate.py", "config/ranges.py", "config/rules.py", "config/ladder_steps.py",
        "fields.py", "model/config.py", "model/speedrun_checks.py", "model/sparse_attention.py", "model/gpt.py",
        "model/generation.py",
        "config/fsdp_keys.py", "errors.py", "preflight/early_checks.py", "preflight/guards.py", "preflight/devices.py",
        "preflight/checkpoint_plan.py", "preflight/option_relevance.py", "preflight/output_dirs.py",
        "execution/float8.py", "execution/strategies.py", "runs/resume.py", "apps/build.py",
        "apps/evaluate.py", "apps/context_eval.py", "eval/extrapolation.py", "report/context_report.py",
        "eval/sampling.py", "eval/zeroshot.py", "data/datamodule.py", "data/mixture.py",
        "data/mixture_store.py", "train/optim.py", "train/muon.py", "train/normuon.py", "train/joint_optimizer.py",
        "train/callbacks/loss_spike.py", "train/callbacks/preemption.py", "config/budget.py",
    ],
    # the corpus: sources, tokenizers, prepare_data.py's shards, the stores that read them
    "test_ways_out_data.py": [
        "data/documents.py", "data/position.py", "data/prepare.py", "data/ranks.py", "data/shards.py",
        "data/sources.py", "data/split.py", "data/stores.py", "data/stream_identity.py", "data/tokenizers.py",
        "data/windows.py",
    ],
    # files a run leaves and other tools read: checkpoints, their conversion, HF export, eval's task files
    "test_ways_out_files.py": [
        "atomic.py", "checkpoint/convert.py", "checkpoint/reader.py", "interop/hf.py", "interop/gpt_neo.py",
        "interop/llama.py", "eval/lm_eval_adapter.py", "eval/scoring.py", "eval/task_rows.py", "eval/tasks.py",
        "recorded.py", "execution/fsdp_strategy.py", "eval/loading.py",
    ],
    # sweeps and their reports, run dirs shared by jobs, the GPU launcher
    "test_ways_out_runs.py": [
        "report/ladder_report.py", "report/lr_report.py", "report/mup_transfer.py", "report/runs.py",
        "report/sweep.py", "runs/relayout.py", "runs/run_dir_lock.py", "runs/sweep_identity.py",
        "runs/sweep_jobs.py", "runs/write_targets.py", "launch/gpu_launcher.py", "runs/one_run.py",
        "launch/fused_groups.py", "launch/hydra_callbacks.py", "report/logged_scalars.py",
    ],
    # the scripts' own arguments and the keys of the Hydra tools in scripts/ that have no schema
    "test_script_arguments.py": [
        "launch/arguments.py", "tools/benchmarks/generate.py", "tools/benchmarks/train_memory.py",
    ],
    # a campaign's ledger and verdicts (scripts/campaign.py): its refusals are asserted there, not yet followed
    "test_campaign_ledger.py": [
        "campaign/actions.py", "campaign/confirm.py", "campaign/launch.py", "campaign/ledger.py", "campaign/store.py",
    ],
}


def raise_sites(modules: list[str]) -> dict[tuple[str, int], str]:
    """(file, line) of every `raise ConfigError(...)`-like statement of `modules` (paths under src/gptlab), with its
    source."""
    sites = {}
    for module in modules:
        path = SRC / module
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                    getattr(node.exc.func, "id", None) in RAISED:
                sites[(str(path), node.lineno)] = ast.get_source_segment(source, node)
    return sites


def unreached(reached: set, excused: dict[tuple[str, str], str], modules: list[str]) -> list[str]:
    """The raises of `modules` that no reached site (file, line) is and no `excused` (module, words in its source):
    why no command here reaches it) covers, one line each."""
    missing = []
    for (path, line), source in raise_sites(modules).items():
        if (path, line) not in reached and not any(path.endswith(m) and w in source for (m, w) in excused):
            missing.append(f"{Path(path).relative_to(SRC)}:{line}: {source.splitlines()[0]}")
    return missing
