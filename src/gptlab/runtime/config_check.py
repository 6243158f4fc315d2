"""Type and range checks of a whole training config, run before anything heavy is built.

Hydra's overrides are untyped: `model.tie_weights=maybe` arrives as the string 'maybe', which is truthy, and
`optimizer.lr=-0.1` only fails deep inside torch. `check_config` walks every group and raises gptlab's own
ConfigError naming the field. Model fields are checked generically from GPTConfig's dataclass annotations, so
a field added there is covered without touching this file; the other groups are tables keyed by field name
(a field a group does not have is simply not checked, so a new data or optimizer option needs one table row).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from omegaconf import DictConfig, ListConfig, OmegaConf

from gptlab.errors import ConfigError
from gptlab.model import GPTConfig

Check = Callable[[str, Any], None]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _fail(field: str, value: Any, wanted: str) -> ConfigError:
    return ConfigError(f"{field}={value!r} is invalid: {wanted}.")


# ---- building blocks: each is check(field, value) and raises naming the field -------------------------------
def boolean(field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise _fail(field, value, "use true or false")


def integer(low: Optional[int] = None, high: Optional[int] = None) -> Check:
    def check(field: str, value: Any) -> None:
        if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = f" >= {low}" if high is None else f" in [{low}, {high}]"
            raise _fail(field, value, f"use an integer{bounds if low is not None else ''}")

    return check


def number(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = False) -> Check:
    def check(field: str, value: Any) -> None:
        ok = _is_number(value) and (value > low if low_open else value >= low)
        ok = ok and (value < high if high_open else value <= high)
        if not ok:
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
            raise _fail(field, value, f"use a number in {interval}")

    return check


def choice(*allowed: Any) -> Check:
    def check(field: str, value: Any) -> None:
        if not any(type(value) is type(a) and value == a for a in allowed):  # 1 is not True, "1" is not 1
            raise _fail(field, value, f"use one of {', '.join(repr(a) for a in allowed)}")

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
        raise _fail(field, value, wanted)

    return check


def text(field: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(field, value, "use a non-empty string")


def writable_dir(field: str, value: Any) -> None:
    """A directory that exists and is writable, or can be created (its nearest existing parent is writable)."""
    text(field, value)
    path = Path(value).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problem = "not writable for this user" if existing.is_dir() else "not a directory"
        raise ConfigError(
            f"{field}={value!r} cannot be written: {existing} is {problem}; choose a directory you can write to."
        )


def betas(field: str, value: Any) -> None:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_number(b) and 0 <= b < 1 for b in value):
        raise _fail(field, value, "use two numbers in [0, 1), e.g. [0.9, 0.95]")


def list_of_text(field: str, value: Any) -> None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _fail(field, value, "use a list of strings")


positive_int = integer(1)
non_negative_int = integer(0)

# ---- one table per group, keyed by field name ---------------------------------------------------------------
TOP_LEVEL: dict[str, Check] = {
    "name": text,
    "seed": integer(0, 2**32 - 1),
    "global_batch_tokens": optional(positive_int),
    "label_smoothing": number(0.0, 1.0, high_open=True),
    "ckpt_path": optional(text),
    "resume": optional(choice("auto")),
    "print_config": boolean,
    "check_memory": boolean,
    "float32_matmul_precision": choice("highest", "high", "medium"),
}
TOKENIZER: dict[str, Check] = {
    "encoding": choice("gpt2", "r50k_base", "cl100k_base"),
    "ranks_file": optional(text),
}
# The DataModule's fields (this is the one place that knows them).
DATA: dict[str, Check] = {
    "block_size": positive_int,
    "batch_size": positive_int,
    "val_fraction": number(0.0, 1.0, low_open=True, high_open=True),
    "samples_per_epoch": optional(positive_int),
    "num_workers": non_negative_int,
    "seed": integer(0, 2**32 - 1),
    "store": choice("memory", "prepared", "streaming"),
    "cache_dir": writable_dir,
    "shard_tokens": positive_int,
    "num_proc": optional(positive_int),
    "sampling": choice("random", "epoch"),
    "val_windows": positive_int,
    "verify_sha256": boolean,
    "document_masking": boolean,
}
OPTIMIZER: dict[str, Check] = {
    "lr": number(0.0, 10.0, low_open=True),
    "betas": betas,
    "eps": number(0.0, 1.0, low_open=True),
    "weight_decay": number(0.0, 1.0),
    "momentum": number(0.0, 1.0, high_open=True),
    "nesterov": boolean,
    "fused": optional(boolean),
    "beta2_decay": number(-1.0, 0.0),
}
SCHEDULER: dict[str, Check] = {
    "warmup_steps": non_negative_int,
    "min_lr_ratio": number(0.0, 1.0),
    "decay_fraction": number(0.0, 1.0),
}
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine")
TRAINER: dict[str, Check] = {
    "accelerator": choice("auto", "cpu", "gpu", "cuda", "mps"),
    "devices": either(positive_int, choice("auto"), wanted="use a positive integer (devices per node) or auto"),
    "num_nodes": positive_int,
    "precision": choice(*PRECISIONS),
    "max_steps": positive_int,
    "max_epochs": either(positive_int, choice(-1), wanted="use -1 (bounded by max_steps) or a positive integer"),
    "val_check_interval": either(positive_int, number(0.0, 1.0, low_open=True),
                                 wanted="use a positive integer (optimizer steps) or a fraction in (0, 1]"),
    "check_val_every_n_epoch": optional(positive_int),
    "limit_val_batches": either(non_negative_int, number(0.0, 1.0),
                                wanted="use a count of batches or a fraction in [0, 1]"),
    "limit_train_batches": either(positive_int, number(0.0, 1.0, low_open=True),
                                  wanted="use a count of batches or a fraction in (0, 1]"),
    "num_sanity_val_steps": integer(-1),
    "log_every_n_steps": positive_int,
    "gradient_clip_val": optional(number(0.0)),
    "accumulate_grad_batches": positive_int,
    "deterministic": either(boolean, choice("warn"), wanted="use true, false or warn"),
    "use_distributed_sampler": boolean,
    "fast_dev_run": either(boolean, positive_int, wanted="use true, false or a positive number of batches"),
    "enable_model_summary": boolean,
    "enable_progress_bar": boolean,
    "enable_checkpointing": boolean,
    "benchmark": optional(boolean),
}
# Callback arguments by name, whichever callback has them.
CALLBACKS: dict[str, Check] = {
    "every_n_train_steps": optional(non_negative_int),
    "save_top_k": integer(-1),
    "save_last": optional(either(boolean, choice("link"), wanted="use true, false or link")),
    "mode": choice("min", "max"),
    "monitor": optional(text),
    "dirpath": optional(text),
    "filename": optional(text),
    "window_size": positive_int,
    "prompts": list_of_text,
    "max_new_tokens": non_negative_int,
    "temperature": number(0.0),
    "top_k": optional(positive_int),
    "refresh_rate": non_negative_int,
    "enable_version_counter": boolean,
    "auto_insert_metric_name": boolean,
}
PATHS: dict[str, Check] = {"log_dir": writable_dir, "output_dir": writable_dir}


def check_table(prefix: str, node: Any, table: dict[str, Check]) -> None:
    if not node:
        return
    for key, value in node.items():
        if key in table:
            table[key](f"{prefix}{key}", value)


# ---- the model, from GPTConfig's annotations ----------------------------------------------------------------
def _matches(value: Any, hint: Any) -> bool:
    """Whether `value` (plain Python, from a YAML/CLI config) fits the type annotation `hint`."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return _is_int(value)
    if hint is float:
        return _is_number(value)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple) or hint in (list, tuple):
        args = typing.get_args(hint)
        return isinstance(value, (list, tuple)) and all(_matches(v, args[0]) for v in value) if args else True
    return True  # a type this checker does not know: GPTConfig's own validation decides


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (Union, types.UnionType):
        parts = [_describe(a) for a in typing.get_args(hint)]
        return " or ".join("null" if p == "NoneType" else p for p in parts)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if typing.get_origin(hint) is list:
        return f"a list of {_describe(typing.get_args(hint)[0])}s"
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def check_model_types(values: dict[str, Any]) -> None:
    """Every model.<field> against GPTConfig's annotation; unknown fields are named too."""
    hints = typing.get_type_hints(GPTConfig)
    known = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown model field(s) {unknown}; known fields: {sorted(known)}.")
    for name, value in values.items():
        if not _matches(value, hints[name]):
            raise _fail(f"model.{name}", value, f"use {_describe(hints[name])}")


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def check_config(cfg: DictConfig) -> None:
    """Every group of a train config, field by field; raises ConfigError naming the first bad one."""
    top = {k: cfg.get(k) for k in TOP_LEVEL if k in cfg}
    check_table("", top, TOP_LEVEL)
    model = _plain(cfg.get("model")) or {}
    check_model_types(model)
    GPTConfig.from_dict({**model, "vocab_size": model.get("vocab_size") or 1})  # ranges and choices
    for prefix, table in (("tokenizer.", TOKENIZER), ("data.", DATA), ("optimizer.", OPTIMIZER),
                          ("scheduler.", SCHEDULER), ("trainer.", TRAINER), ("paths.", PATHS)):
        check_table(prefix, _plain(cfg.get(prefix[:-1])), table)
    for name, node in (_plain(cfg.get("callbacks")) or {}).items():
        if node is not None:
            if not isinstance(node, dict) or "_target_" not in node:
                raise _fail(f"callbacks.{name}", node, "use a callback node with a _target_, or null to drop it")
            check_table(f"callbacks.{name}.", node, CALLBACKS)


def names_in(tables: Iterable[dict[str, Check]]) -> set[str]:
    """Every field name the tables check (for tests that the tables cover the shipped YAML)."""
    return {name for table in tables for name in table}
