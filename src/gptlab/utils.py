"""Small helpers shared by the entry points."""

from __future__ import annotations

from typing import Any

import hydra
from omegaconf import DictConfig


def instantiate_dict(group: DictConfig | None) -> dict[str, Any]:
    """Instantiate every entry of a config group that is a dict of `_target_` objects (callbacks, loggers);
    an entry set to null is switched off."""
    if not group:
        return {}
    return {name: hydra.utils.instantiate(node) for name, node in group.items() if node is not None and "_target_" in node}
