"""Fused sweep members (hydra/launcher=fused): k runs of one model shape, each with its own Trainer, optimizer,
schedule, clipping, checkpoints and run dir, whose training forward and backward run as ONE vmapped computation
(HFTA, Wang et al. MLSys 2021: jobs that differ only in hyper-parameters run the same operators on the same shapes).

Each member is a whole gptlab run in a thread of its own (gptlab.launch.fused_launcher). The only thing fused is the
loss function `parallelize` hands the LightningModule, the one home of how the model runs: a member's call gives its
micro-batch to the group and waits; when every member still training has given one, the call that completes the
round stacks the members' parameters (torch.func.stack_module_state's layout), runs the model under torch.func.vmap,
each member's loss with its own label smoothing and z-loss, and one backward. Each member then gets its own loss and
the gradient of its own loss, which it hands to Lightning's backward as a node whose gradient is that (gradient
accumulation, clipping, the optimizer step and everything after stay the member's own, as in a run alone).
Validation (no grad) calls the member's own model, unfused. Members never share a gradient, so one that goes
non-finite fails alone and leaves the group; the others go on.

torch.func has no batching rule for the CPU flash attention kernel (it would loop over members), so during the
fused forward attention folds the member dim into the batch dim: one kernel call for all members.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch
import torch.nn.functional as F
from torch._C import _functorch
from torch.func import functional_call, vmap

from gptlab.model.loss import LossParts, loss_parts

_LOCAL = threading.local()  # the group and member index of a member's thread (set by the fused launcher)


@dataclass
class _Request:
    model: torch.nn.Module
    idx: torch.Tensor
    targets: torch.Tensor
    doc_ids: Optional[torch.Tensor]
    label_smoothing: float
    z_loss: float
    result: Optional[tuple[LossParts, list[torch.Tensor]]] = None
    error: Optional[BaseException] = None
    done: bool = field(default=False)


class FusedGroup:
    """The rendezvous of k member threads: their setups one at a time (Hydra's and torch's process-wide state, the
    seed among them, belong to one run at a time), then one fused forward and backward per round of micro-batches."""

    def __init__(self, size: int) -> None:
        self.active = size  # members still training
        self._cond = threading.Condition()
        self._pending: dict[int, _Request] = {}
        self._setup = threading.Lock()
        self._setting_up: Optional[int] = None

    @contextlib.contextmanager
    def member(self, index: int) -> Iterator[None]:
        """The body of member `index`'s thread: its setup waits for the previous member's first step; its end
        (finished, failed, skipped) leaves the group, so the others never wait for it."""
        self._setup.acquire()
        self._setting_up = index
        _LOCAL.member = (self, index)
        try:
            yield
        finally:
            _LOCAL.member = None
            self._end_setup(index)
            with self._cond:
                self.active -= 1
                self._run_round_if_complete()

    def _end_setup(self, index: int) -> None:
        if self._setting_up == index:
            self._setting_up = None
            self._setup.release()

    def submit(self, index: int, request: _Request) -> tuple[LossParts, list[torch.Tensor]]:
        self._end_setup(index)  # its first step: the next member may set up
        with self._cond:
            self._pending[index] = request
            self._run_round_if_complete()
            while not request.done:
                self._cond.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _run_round_if_complete(self) -> None:
        """Under the condition's lock: compute the round once every active member has given its micro-batch."""
        if not self._pending or len(self._pending) < self.active:
            return
        requests = [self._pending[i] for i in sorted(self._pending)]
        self._pending = {}
        try:
            for request, result in zip(requests, fused_step(requests)):
                request.result = result
        except BaseException as err:  # every member of the round sees the error, none waits forever
            for request in requests:
                request.error = err
        for request in requests:
            request.done = True
        self._cond.notify_all()


def fused_step(requests: list[_Request]) -> list[tuple[LossParts, list[torch.Tensor]]]:
    """Each member's LossParts (detached) and the gradient of its objective wrt its parameters (in
    `named_parameters` order), from one vmapped forward and one backward over all members."""
    models = [r.model for r in requests]
    own = [dict(m.named_parameters()) for m in models]
    own_buffers = [dict(m.named_buffers()) for m in models]
    names = list(own[0])
    params = {n: torch.stack([p[n].detach() for p in own]).requires_grad_() for n in names}
    buffers = {n: torch.stack([b[n] for b in own_buffers]) for n in own_buffers[0]}
    idx = torch.stack([r.idx for r in requests])
    with_docs = requests[0].doc_ids is not None
    docs = torch.stack([r.doc_ids for r in requests]) if with_docs else None

    def logits_of(p: dict, b: dict, x: torch.Tensor, d: Optional[torch.Tensor]) -> torch.Tensor:
        return functional_call(models[0], (p, b), (x,), {"doc_ids": d} if d is not None else {})

    with torch.enable_grad(), attention_folded():
        logits = vmap(logits_of, in_dims=(0, 0, 0, 0 if with_docs else None))(params, buffers, idx, docs)
        parts = [loss_parts(logits[i], r.targets, r.model.config.vocab_size, r.label_smoothing, r.z_loss)
                 for i, r in enumerate(requests)]
        torch.autograd.backward([p.objective for p in parts])
    detached = [LossParts(p.objective.detach(), p.ce.detach(), None if p.z is None else p.z.detach()) for p in parts]
    return [(d, [params[n].grad[i] for n in names]) for i, d in enumerate(detached)]


class _GivenGradients(torch.autograd.Function):
    """A member's objective as a node whose backward gives its parameters the gradients the fused step computed,
    times what Lightning's backward passes in (1 / accumulation)."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, grads: list[torch.Tensor], *params: torch.Tensor) -> torch.Tensor:
        ctx.grads = grads
        return value.clone()

    @staticmethod
    def backward(ctx: Any, out: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        return (None, None, *(g * out for g in ctx.grads))


def member_of_this_thread() -> Optional[tuple[FusedGroup, int]]:
    """(group, index) when this thread runs a member of a fused group, else None."""
    return getattr(_LOCAL, "member", None)


def fused_loss_fn(model: torch.nn.Module, eager: Any, group: FusedGroup, index: int) -> Any:
    """The member's loss function: training micro-batches through the group, validation (no grad) on its own."""
    params = [p for _, p in model.named_parameters()]

    def loss_fn(idx: torch.Tensor, targets: torch.Tensor, doc_ids: Optional[torch.Tensor] = None,
                label_smoothing: float = 0.0, z_loss: float = 0.0) -> LossParts:
        if not torch.is_grad_enabled():
            return eager(idx, targets, doc_ids, label_smoothing, z_loss)
        parts, grads = group.submit(index, _Request(model, idx, targets, doc_ids, label_smoothing, z_loss))
        objective = _GivenGradients.apply(parts.objective, grads, *params)
        return LossParts(objective, parts.ce, parts.z)

    return loss_fn


_SDPA, _NORMS = F.scaled_dot_product_attention, {"layer_norm": F.layer_norm, "rms_norm": F.rms_norm}


def _physical(t: Any, level: int) -> Any:
    """A vmapped tensor as the tensor that holds every member, member dim first (None: not vmapped, or not a
    tensor)."""
    if not isinstance(t, torch.Tensor) or not _functorch.is_batchedtensor(t):
        return None
    inner, dim = _functorch._unwrap_batched(t, level)
    return inner.movedim(dim, 0)


def _folded_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """scaled_dot_product_attention on vmapped q, k, v as one call with the member dim folded into the batch dim;
    anything else (a per-member mask, no vmap) goes to torch's own."""
    mask = kwargs.get("attn_mask", args[0] if args else None)
    if not _functorch.is_batchedtensor(q) or (mask is not None and _functorch.is_batchedtensor(mask)):
        return _SDPA(q, k, v, *args, **kwargs)
    level = _functorch.maybe_get_level(q)
    physical = [_physical(t, level) for t in (q, k, v)]
    members = next(p.shape[0] for p in physical if p is not None)
    physical = [p if p is not None else t.expand(members, *t.shape) for p, t in zip(physical, (q, k, v))]
    out = _SDPA(*(p.reshape(-1, *p.shape[2:]) for p in physical), *args, **kwargs)
    return _functorch._add_batch_dim(out.reshape(members, -1, *out.shape[1:]), 0, level)


def _per_member_norm(name: str) -> Any:
    """F.layer_norm / F.rms_norm called once per member on its own slice: torch.func's batching rule for them sums
    the gain's and bias's gradients in another order than the kernel a run alone calls (1e-10 apart, which
    Muon's bf16 Newton-Schulz and clipping turn into visible differences); the kernel's own backward keeps every
    member's gradients bitwise equal to its run alone. Norms are a small share of a step."""
    norm = _NORMS[name]

    def per_member(x: torch.Tensor, shape: Any, weight: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not _functorch.is_batchedtensor(x):
            return norm(x, shape, weight, *args, **kwargs)
        level = _functorch.maybe_get_level(x)
        xs = _physical(x, level)
        rest = list(args)
        bias = rest.pop(0) if name == "layer_norm" and rest else kwargs.pop("bias", None)
        gains, biases = _physical(weight, level), _physical(bias, level)
        out = torch.stack([
            norm(xs[i], shape, weight if gains is None else gains[i],
                 *([bias if biases is None else biases[i]] if name == "layer_norm" else []), *rest, **kwargs)
            for i in range(xs.shape[0])])
        return _functorch._add_batch_dim(out, 0, level)

    return per_member


_FOLDED = {"scaled_dot_product_attention": _folded_sdpa, **{name: _per_member_norm(name) for name in _NORMS}}


@contextlib.contextmanager
def attention_folded() -> Iterator[None]:
    """Attention as one kernel call for all members and each norm as its run alone computes it, while the fused
    forward runs (the other member threads wait for its result meanwhile, so nothing else calls them)."""
    saved = {name: getattr(F, name) for name in _FOLDED}
    for name, fn in _FOLDED.items():
        setattr(F, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(F, name, fn)
