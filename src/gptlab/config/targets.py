"""The keyword arguments of a node's `_target_`, read from its signature: what a user may append to a node that
calls a constructor (`+trainer.limit_train_batches=5`), whatever library version is installed."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Optional

from omegaconf import DictConfig

from gptlab.config.suggest import closest
from gptlab.errors import ConfigError


def target_parameters(node: Any) -> Optional[set[str]]:
    """The names `node._target_` accepts as keywords; None when the node has no importable target or the target
    takes **kwargs (then any key may be meant)."""
    if not isinstance(node, (DictConfig, dict)) or not isinstance(node.get("_target_"), str):
        return None
    from hydra.utils import get_object  # how instantiate resolves a _target_ string

    try:
        target = get_object(node["_target_"])
        signature = inspect.signature(target.__init__ if inspect.isclass(target) else target)
    except (ImportError, ValueError, TypeError, AttributeError):
        return None
    params = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}


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
