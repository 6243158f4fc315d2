"""Muon for the hidden weight matrices and AdamW for the rest, as one torch Optimizer (`optimizer=muon`).

Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is Scalable for LLM Training") orthogonalizes each 2-D hidden
matrix's momentum by a Newton–Schulz iteration; its authors train embeddings, the output head, norm gains and
biases with AdamW. torch ships both (`torch.optim.Muon`, `torch.optim.AdamW`); what it does not ship is one
object that holds both. Lightning steps one optimizer per `configure_optimizers` unless the module switches to
manual optimization, which would take gradient accumulation, clipping and the precision plugin's scaling out of
Lightning's hands. So `MuonAdamW` is a thin Optimizer over the two: its `param_groups` are the two optimizers'
own group dicts (a scheduler's lr change reaches both), `step` steps both, and its state dict carries both, so a
checkpoint resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import torch
from torch import nn
from torch.optim import Optimizer

from gptlab.errors import ConfigError
from gptlab.model.parametrization import hidden_matrices

MUON_KEY = "muon"  # a param group flag: True for the groups Muon steps


def muon_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Hidden 2-D matrices (attention and MLP weights) for Muon; embeddings and the head, which map tokens rather
    than hidden features, and every 1-D gain or bias for AdamW. Weight decay as `weight_decay_groups`: on
    matrices and embeddings only."""
    matrices = hidden_matrices(model)  # the split muP's per-layer lrs use too
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if id(p) in matrices], "weight_decay": weight_decay, "name": "muon",
         MUON_KEY: True},
        {"params": [p for p in params if p.dim() >= 2 and id(p) not in matrices], "weight_decay": weight_decay,
         "name": "adamw_decay", MUON_KEY: False},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, "name": "adamw_no_decay",
         MUON_KEY: False},
    ]
    return [g for g in groups if g["params"]]


class MuonAdamW(Optimizer):
    """`torch.optim.Muon` over the groups flagged `muon`, `torch.optim.AdamW` over the others, stepped together."""

    def __init__(
        self,
        params: Iterable[dict],
        lr: float,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr_fn: Optional[str] = "match_rms_adamw",
        betas: Sequence[float] = (0.9, 0.95),
        eps: float = 1e-8,
    ) -> None:
        groups = list(params)
        if not all(isinstance(g, dict) and MUON_KEY in g for g in groups):
            raise ConfigError("optimizer=muon needs the parameter groups of gptlab.train.muon.muon_groups "
                              "(hidden matrices apart from embeddings, head, norms and biases).")
        hidden = [g for g in groups if g[MUON_KEY]]
        rest = [g for g in groups if not g[MUON_KEY]]
        if not hidden:
            raise ConfigError("optimizer=muon found no 2-D hidden weight matrix to orthogonalize; use optimizer=adamw.")
        self.muon = torch.optim.Muon(hidden, lr=lr, weight_decay=weight_decay, momentum=momentum,
                                     nesterov=nesterov, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        self.adamw = torch.optim.AdamW(rest, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        # The same dicts, not copies: a scheduler's or a checkpoint's lr lands in the optimizer that uses it.
        super().__init__([*self.muon.param_groups, *self.adamw.param_groups], {})

    @property
    def parts(self) -> tuple[Optimizer, ...]:
        """The inner optimizers, each holding the state of its own parameters (model.untie_at copies it)."""
        return self.muon, self.adamw

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:  # Lightning passes the forward/backward as a closure
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != {"muon", "adamw"}:
            raise ConfigError("this checkpoint's optimizer state is not optimizer=muon's (it has keys "
                              f"{sorted(state_dict)}); resume it with the optimizer it was trained with.")
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        # load_state_dict gives each inner optimizer new group dicts: share those, in place (Lightning's
        # LightningOptimizer holds this very list).
        self.param_groups[:] = [*self.muon.param_groups, *self.adamw.param_groups]


def muon(params: Iterable[dict], **kwargs: Any) -> MuonAdamW:
    """The Hydra target of conf/optimizer/muon.yaml."""
    return MuonAdamW(params, **kwargs)


muon.param_groups = muon_groups  # read by gptlab.train.optim.param_groups: the groups this optimizer needs
