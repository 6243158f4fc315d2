"""Muon for the hidden weight matrices and AdamW for the rest, as one torch Optimizer (`optimizer=muon`).

Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is Scalable for LLM Training") orthogonalizes each 2-D hidden
matrix's momentum by a Newton–Schulz iteration; its authors train embeddings, the output head, norm gains and
biases with AdamW. torch ships both (`torch.optim.Muon`, `torch.optim.AdamW`); what it does not ship is one
object that holds both. Lightning steps one optimizer per `configure_optimizers` unless the module switches to
manual optimization, which would take gradient accumulation, clipping and the precision plugin's scaling out of
Lightning's hands. So `MuonAdamW` is a JointOptimizer over the two (gptlab.train.joint_optimizer says how).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

import torch
from torch import nn

from gptlab.errors import ConfigError
from gptlab.model.parametrization import hidden_matrices
from gptlab.train.joint_optimizer import JointOptimizer

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


class MuonAdamW(JointOptimizer):
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
        self._join("muon", muon=torch.optim.Muon(hidden, lr=lr, weight_decay=weight_decay, momentum=momentum,
                                                 nesterov=nesterov, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn),
                   adamw=torch.optim.AdamW(rest, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))


def muon(params: Iterable[dict], **kwargs: Any) -> MuonAdamW:
    """The Hydra target of conf/optimizer/muon.yaml."""
    return MuonAdamW(params, **kwargs)


muon.param_groups = muon_groups  # read by gptlab.train.optim.param_groups: the groups this optimizer needs
