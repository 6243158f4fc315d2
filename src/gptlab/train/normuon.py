"""NorMuon on the hidden matrices and Adam on embeddings, head and scalars, each with its own lr
(`optimizer=normuon`): the speedrun's optimizer split.

The split (modded-nanogpt record 3, 2024-10-04, Muon on the hidden matrices; records 4-9, Oct.-Nov. 2024, Adam on the
embeddings, the head and the scalars with lrs of their own) and NorMuon (record 41, 2025-10-24, Li et al. 2025,
arXiv:2510.05491). NorMuon is Muon followed by a per-neuron second-moment normalization: with O the Newton–Schulz
orthogonalization of the Nesterov momentum (rows x cols),

    s    = mean of O^2 over the longer side's entries of each row (rows >= cols) or column (rows < cols)
    v   <- beta2 v + (1 - beta2) s                          (an EMA per neuron, like Adam's, but one number each)
    O'   = O / sqrt(v)                                      (equalizes the neurons' update sizes)
    O''  = O' ||O||_F / ||O'||_F                             (and keeps Muon's overall update size)
    W   <- W (1 - lr wd) - lr max(1, rows / cols)^0.5 O''   (the record's shape factor on the lr)

One optimizer object steps both parts, as MuonAdamW does (gptlab.train.joint_optimizer says why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import torch
from torch import nn
from torch.optim import Optimizer

from gptlab.errors import ConfigError
from gptlab.model.parametrization import hidden_matrices
from gptlab.train.joint_optimizer import JointOptimizer

PART = "part"  # a param group's entry: which part of the split it is (GROUPS)
GROUPS = ("hidden", "embed", "head", "scalars")  # hidden: NorMuon; the others: Adam, each with its own lr
NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)  # Keller Jordan's quintic Newton–Schulz (record 3)


def speedrun_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """One group per part, always all four (an empty one stays, so that a run resumed after model.untie_at rebuilds
    the same groups): the hidden 2-D matrices; the head's weight (tied or not: a tied head trains with the head's lr,
    as the record's does); the other embeddings (token once untied, positions); every 1-D gain and bias. Weight decay
    is set per part by the optimizer (`weight_decay` here is the NorMuon part's)."""
    matrices = hidden_matrices(model)
    head = getattr(model, "head", None)
    head_ids = {id(head.weight)} if head is not None else set()
    params = [p for p in model.parameters() if p.requires_grad]  # a tied head appears once
    parts = {
        "hidden": [p for p in params if id(p) in matrices],
        "head": [p for p in params if id(p) in head_ids],
        "embed": [p for p in params if p.dim() >= 2 and id(p) not in matrices and id(p) not in head_ids],
        "scalars": [p for p in params if p.dim() < 2],
    }
    return [{"params": parts[name], "name": name, PART: name} for name in GROUPS]


def newton_schulz(m: torch.Tensor, steps: int) -> torch.Tensor:
    """The orthogonal factor of m's polar decomposition, approximately: X0 = m / ||m||_F on the wide side, then
    X <- a X + (b S + c S^2) X with S = X X^T, in bf16 on CUDA (as the record) and fp32 elsewhere."""
    a, b, c = NS_COEFFICIENTS
    x = m.to(torch.bfloat16 if m.is_cuda else torch.float32)
    tall = m.shape[-2] > m.shape[-1]
    x = x.mT if tall else x
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=1e-7)
    for _ in range(steps):
        s = x @ x.mT
        x = a * x + (b * s + c * s @ s) @ x
    return (x.mT if tall else x).to(m.dtype)


def normalize_neurons(o: torch.Tensor, v: torch.Tensor, beta2: float) -> torch.Tensor:
    """NorMuon's step on an orthogonalized update o: updates the per-neuron EMA v in place, returns o'' (module doc)."""
    dim = -1 if o.shape[-2] >= o.shape[-1] else -2
    v.lerp_(o.square().mean(dim=dim, keepdim=True), 1 - beta2)
    scaled = o / v.clamp(min=1e-10).sqrt()
    return scaled * (o.norm() / scaled.norm().clamp(min=1e-10))


class NorMuon(Optimizer):
    """NorMuon over 2-D matrices (module doc): Nesterov momentum, Newton–Schulz, per-neuron normalization."""

    def __init__(self, params: Iterable[Any], lr: float, weight_decay: float = 0.0, momentum: float = 0.95,
                 beta2: float = 0.95, ns_steps: int = 5) -> None:
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, beta2=beta2,
                                      ns_steps=ns_steps))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            mu, lr = group["momentum"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                    side = (p.shape[0], 1) if p.shape[0] >= p.shape[1] else (1, p.shape[1])
                    state["neuron_variance"] = torch.zeros(side, dtype=torch.float32, device=p.device)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu)  # Nesterov: the gradient, a step further along the momentum
                o = normalize_neurons(newton_schulz(update, group["ns_steps"]).float(), state["neuron_variance"],
                                      group["beta2"])
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(o.to(p.dtype), alpha=-lr * max(1.0, p.shape[0] / p.shape[1]) ** 0.5)
        return loss


class NorMuonAdam(JointOptimizer):
    """NorMuon over the `hidden` group, torch's AdamW over `embed`, `head` and `scalars`, stepped together; each
    group gets its part's lr (and weight decay) here, so a schedule scales each from its own peak."""

    def __init__(
        self,
        params: Iterable[dict],
        lr: float,
        embed_lr: float,
        head_lr: float,
        scalar_lr: float,
        weight_decay: float = 0.0,
        momentum: float = 0.95,
        beta2: float = 0.95,
        ns_steps: int = 5,
        adam_betas: Sequence[float] = (0.65, 0.95),
        adam_eps: float = 1e-8,
        adam_weight_decay: float = 0.0,
    ) -> None:
        groups = list(params)
        if sorted(g.get(PART, "") for g in groups if isinstance(g, dict)) != sorted(GROUPS):
            raise ConfigError("optimizer=normuon needs the parameter groups of gptlab.train.normuon.speedrun_groups "
                              f"(one each of {', '.join(GROUPS)}).")
        lrs = {"hidden": lr, "embed": embed_lr, "head": head_lr, "scalars": scalar_lr}
        for g in groups:
            g["lr"] = lrs[g[PART]]
            g["weight_decay"] = weight_decay if g[PART] == "hidden" else (0.0 if g[PART] == "scalars"
                                                                          else adam_weight_decay)
        hidden = [g for g in groups if g[PART] == "hidden"]
        self._join("normuon", normuon=NorMuon(hidden, lr=lr, weight_decay=weight_decay, momentum=momentum, beta2=beta2,
                                              ns_steps=ns_steps),
                   adam=torch.optim.AdamW([g for g in groups if g[PART] != "hidden"], lr=embed_lr,
                                          betas=tuple(adam_betas), eps=adam_eps))


def normuon(params: Iterable[dict], **kwargs: Any) -> NorMuonAdam:
    """The Hydra target of conf/optimizer/normuon.yaml."""
    return NorMuonAdam(params, **kwargs)


normuon.param_groups = speedrun_groups  # read by gptlab.train.optim.param_groups: the groups this optimizer needs
