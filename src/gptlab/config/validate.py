"""`check(cfg)`: what Hydra's typed nodes cannot say, right after compose and before anything heavy is built.

Hydra has refused wrong types and misspelt keys while composing (gptlab.config.entry words its errors); this
checks what is left: keys appended with `+` (against the schema, or the constructor's signature), each field's
range (its schema's `check`), true/false fields given another word on the command line (OmegaConf turns `no`,
`off`, `1` into booleans), the model's own validation (GPTConfig), and the cross-field rules (gptlab.config.rules).
It returns what the config alone decides (`Decided`), read once here and handed on.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from omegaconf import DictConfig, ListConfig, OmegaConf

from gptlab.config import budget
from gptlab.config.budget import Budget
from gptlab.config.callbacks import BY_TARGET
from gptlab.config.fields import check_of, schema_fields
from gptlab.config.fsdp_keys import uses_fsdp
from gptlab.config.ranges import fail
from gptlab.config.rules import check_rules
from gptlab.config.schemas import Runtime, Stages
from gptlab.config.store import SCHEMAS
from gptlab.config.suggest import closest, unknown_key
from gptlab.config.targets import target_parameters
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig

KNOWN = set(SCHEMAS.values()) | set(BY_TARGET.values()) | {Runtime, Stages}
NAMED_NODES = ("callbacks", "logger")  # groups that are dicts of named constructor nodes
# Constructor arguments that gptlab's code passes (the parameter groups, the tokenizer, the callbacks...).
PASSED_BY_GPTLAB = {"params", "tokenizer", "optimizer", "total_steps", "callbacks", "logger", "plugins"}


@dataclass(frozen=True)
class Decided:
    """What a checked train config decides by itself, for the builders: how the model runs, and whether it runs
    under trainer=fsdp (sharded checkpoints), and the budget= that set trainer.max_steps (None: none)."""
    runtime: Runtime
    fsdp: bool
    bound: Optional[Budget] = None


GROUPS = ("runtime", "stages", "tokenizer", "data", "optimizer", "scheduler", "trainer", "paths")


def check(cfg: DictConfig, overrides: Optional[Sequence[str]] = None, targets: bool = True,
          before_targets: Optional[Callable[[], None]] = None) -> Decided:
    """Raise ConfigError naming the first bad key of a composed train config. `overrides` are the command line's
    (default: Hydra's record of them, when Hydra ran). The _target_ paths come last, after `before_targets` (the
    machine's refusals): looking one up imports its module (Lightning's Trainer and loggers: seconds), which a
    refusal for a reason that needs no import should not wait for. `targets=False` skips them. A budget= sets
    trainer.max_steps here (gptlab.config.budget), once the keys it reads are checked."""
    strict_booleans(cfg, hydra_overrides() if overrides is None else overrides)
    check_node("", cfg, targets=False)
    check_model(cfg.get("model"))  # before data, whose block_size follows model.block_size
    for prefix, node in _group_nodes(cfg):
        check_node(prefix, node, targets=False)
    check_rules(cfg)
    bound = budget.apply(cfg)  # budget= sets trainer.max_steps, from the keys checked above (config.budget)
    if before_targets is not None:
        before_targets()
    if targets:
        check_targets(cfg)
    return Decided(Runtime(**cfg.get("runtime", {})), uses_fsdp(cfg.get("trainer")), bound)


def check_targets(cfg: DictConfig) -> None:
    """The _target_ of every node `check` reads names something that imports (check_target)."""
    for prefix, node in [("", cfg), *_group_nodes(cfg)]:
        if "_target_" in node and not OmegaConf.is_missing(node, "_target_"):
            check_target(f"{prefix}_target_", plain(node["_target_"]))


def _group_nodes(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """(key prefix, node) of each group node and each named node (callbacks, loggers) of a train config."""
    nodes = [(f"{group}.", cfg[group]) for group in GROUPS if isinstance(cfg.get(group), DictConfig)]
    for group in NAMED_NODES:
        for name, node in (cfg.get(group) or {}).items():
            if node is not None:
                if not isinstance(node, DictConfig) or "_target_" not in node:
                    raise fail(f"{group}.{name}", plain(node), "use a node with a _target_, or null to drop it")
                nodes.append((f"{group}.{name}.", node))
    return nodes


def schema_of(node: DictConfig) -> Optional[type]:
    typed = OmegaConf.get_type(node)
    if typed in KNOWN:
        return typed
    return BY_TARGET.get(node.get("_target_"))


def check_node(prefix: str, node: DictConfig, set_values_only: bool = False, targets: bool = True) -> None:
    """Its _target_ (with `targets`), appended keys, then each field's range. A node of no known schema is left to
    its constructor. `set_values_only` leaves out fields that interpolate others not known yet (eval's data follows
    the model that the checkpoint brings)."""
    if targets and "_target_" in node and not OmegaConf.is_missing(node, "_target_"):
        check_target(f"{prefix}_target_", plain(node["_target_"]))
    schema = schema_of(node)
    if schema is None:
        return
    check_package(prefix.rstrip("."), getattr(schema, "needs_package", None))
    fields = schema_fields(schema)
    extra = [k for k in node.keys() if k not in fields and (prefix or k != "hydra")]  # Hydra's node, in a callback
    if extra:
        check_appended(prefix, node, schema, extra)
    check_fields(prefix, node, schema, set_values_only)


def check_package(field: str, package: Optional[str]) -> None:
    """A node whose class needs a package gptlab does not install by default (logger=wandb, logger=mlflow): one
    line with the install command, before anything is built, not Lightning's ModuleNotFoundError from inside it."""
    if package is not None and importlib.util.find_spec(package) is None:
        raise ConfigError(f"{field} needs the {package} package, which is not installed: pip install {package} (or "
                          f"pip install -e \".[{package}]\" in a gptlab checkout), or log with another: "
                          "logger=tensorboard.")


def check_fields(prefix: str, node: DictConfig, schema: type, set_values_only: bool = False) -> None:
    """The range of each of `schema`'s fields that `node` sets (a node that is not typed by it, such as eval.yaml's
    own trainer, is checked by the same rules)."""
    for name, f in schema_fields(schema).items():
        rule = check_of(f)
        if rule is not None and name in node and not (set_values_only and OmegaConf.is_interpolation(node, name)):
            rule(f"{prefix}{name}", plain(node[name]))


def check_appended(prefix: str, node: DictConfig, schema: type, extra: list[str]) -> None:
    """Keys added with `+`: an argument of the node's constructor (checked where gptlab knows its range), else
    refused naming the closest. A constructor that takes **kwargs (or cannot be imported) decides itself."""
    target = node.get("_target_")
    params = target_parameters(node) if target is not None else set()
    if params is None:
        return
    for key in extra:
        if key in params and key not in PASSED_BY_GPTLAB:
            rule = getattr(schema, "appended", {}).get(key)
            if rule is not None:
                rule(f"{prefix}{key}", plain(node[key]))
            continue
        settings = [k for k in schema_fields(schema) if k not in ("_target_", "_partial_")]
        if key in PASSED_BY_GPTLAB:
            raise ConfigError(f"{prefix}{key} is passed by gptlab itself; drop it from the config.")
        raise ConfigError(unknown_key(f"{prefix}{key}", settings, target=target,
                                      candidates=(params or set()) - PASSED_BY_GPTLAB))


def check_model(node: Any) -> None:
    """Appended keys by name, then GPTConfig's own validation (ranges, choices, divisibility)."""
    values = plain(node) or {}
    known = [f.name for f in dataclasses.fields(GPTConfig)]
    for key in values:
        if key not in known:
            raise ConfigError(unknown_key(f"model.{key}", known))
    GPTConfig.from_dict({**values, "vocab_size": values.get("vocab_size") or 1})


def strict_booleans(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """`model.tie_weights=no` (or off, 1, yes) reaches a true/false field as a string or an integer, which
    OmegaConf converts to a boolean without a word; gptlab asks for true or false, as YAML writes them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.is_sweep_override() or override.is_delete():
            continue
        current = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        value = override.value()
        if isinstance(current, bool) and not isinstance(value, bool):
            raise fail(key, value, "use true or false")


def hydra_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def check_target(field: str, target: Any) -> None:
    """`field` (a node's _target_) names something Python can import, as Hydra's instantiate will look it up: else
    one message with what is missing and the closest name there (`torch.optim.SGDD`: torch.optim.SGD), before
    anything is built, instead of Hydra's InstantiationException traceback."""
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{field}={target!r} is not a class or function path; drop {field} to use the option's "
                          "own, or give one such as torch.optim.SGD.")
    parts = target.split(".")
    found, reason = None, ""
    for cut in range(len(parts), 0, -1):  # the longest prefix that imports as a module, then attributes
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            reason = reason or f"no module named {err.name!r}"
            continue
        except Exception as err:  # the module exists but fails to import: that is its own problem, shown as is
            raise ConfigError(f"{field}={target!r}: importing {'.'.join(parts[:cut])} failed: {err!r}.") from err
        for i, name in enumerate(parts[cut:], start=cut):
            if not hasattr(found, name):
                owner = ".".join(parts[:i])
                near = closest(name, [n for n in dir(found) if not n.startswith("_")])
                meant = f" Did you mean {owner}.{near}?" if near else ""
                raise ConfigError(f"{field}={target!r} does not import: {owner} has no {name!r}.{meant} Drop "
                                  f"{field} to use the option's own, or give a path that imports.")
            found = getattr(found, name)
        return
    raise ConfigError(f"{field}={target!r} does not import: {reason}. Drop {field} to use the option's own, or give a "
                      "path that imports (a package that is not installed: pip install it).")
