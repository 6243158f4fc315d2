"""Several torch optimizers stepped as one (`optimizer=muon`, `optimizer=normuon`).

Lightning steps one optimizer per `configure_optimizers` unless the module switches to manual optimization, which
would take gradient accumulation, clipping and the precision plugin's scaling out of Lightning's hands. A
`JointOptimizer` is a thin Optimizer over named parts: its `param_groups` are the parts' own group dicts (a
scheduler's or a checkpoint's lr lands in the part that uses it), `step` steps every part, and its state dict holds
each part's under its name, so a checkpoint resumes exactly and another optimizer's state is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch
from torch.optim import Optimizer

from gptlab.errors import ConfigError


class JointOptimizer(Optimizer):
    """Call `_join(option, name=part, ...)` at the end of a subclass's __init__; `option` is its optimizer=<option>.
    Each part is also the attribute of its name (e.g. `.muon`, `.adamw`)."""

    def _join(self, option: str, **parts: Optimizer) -> None:
        self._option, self._parts = option, parts
        for name, part in parts.items():
            setattr(self, name, part)
        super().__init__([g for part in parts.values() for g in part.param_groups], {})  # the same dicts, not copies

    @property
    def parts(self) -> tuple[Optimizer, ...]:
        """The inner optimizers, each holding the state of its own parameters (model.untie_at copies it)."""
        return tuple(self._parts.values())

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:  # Lightning passes the forward/backward as a closure
            with torch.enable_grad():
                loss = closure()
        for part in self._parts.values():
            part.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {name: part.state_dict() for name, part in self._parts.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != set(self._parts):
            raise ConfigError(f"this checkpoint's optimizer state is not optimizer={self._option}'s (it has keys "
                              f"{sorted(state_dict)}); resume it with the optimizer it was trained with.")
        for name, part in self._parts.items():
            part.load_state_dict(state_dict[name])
        # load_state_dict gives each part new group dicts: share those, in place (Lightning's LightningOptimizer
        # holds this very list).
        self.param_groups[:] = [g for part in self._parts.values() for g in part.param_groups]
