"""The keyword arguments of a node's `_target_`, read from its signature: what a user may append to a node that
calls a constructor (`+trainer.limit_train_batches=5`), whatever library version is installed."""

from __future__ import annotations

import inspect
from typing import Any, Optional

from omegaconf import DictConfig


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

