"""Fused sweep members (hydra/launcher=fused): k runs of one model shape, each with its own Trainer, optimizer,
schedule, clipping, checkpoints and run dir, whose training forward and backward run as ONE vmapped computation
(HFTA, Wang et al. MLSys 2021: jobs that differ only in hyper-parameters run the same operators on the same shapes).

Each member is a whole gptlab run in a thread of its own (gptlab.launch.fused_launcher). The only thing fused is the
loss function `parallelize` hands the LightningModule, the one home of how the model runs: a member's call gives its
micro-batch to the group and waits; when every member still training has given one, the call that completes the
round stacks the members' parameters (torch.func.stack_module_state's layout), runs the model under torch.func.vmap,
each member's loss with its own label smoothing, z-loss and multi-token weights, and one backward. Each member then
gets its own loss and the gradient of its own loss, which it hands to Lightning's backward as a node whose gradient
is that (gradient accumulation, clipping, the optimizer step and everything after stay the member's own, as in a run
alone). Validation (no grad) calls the member's own model, unfused. Members never share a gradient, so one that goes
non-finite fails alone and leaves the group; the others go on.

A round fuses only members whose step is the same computation (step_signature: the same modules, attributes, parameter
and input shapes); members that differ there (a stage, an untied head, a resumed member at another step) run as rounds
of their own, so no member ever runs another's code path. Each member's clock (FusedGroup.seconds) counts its own
turns and its share of each round it was in: what its run's fit_seconds and tokens/s are measured on.

Attention, the norms and dropout run outside torch.func's batching rules (_FusedForward says why); dropout draws
each member's masks from its own random streams, which FusedGroup keeps per member.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from gptlab.checkpoint.rng import rng_states, set_rng_states
from gptlab.lightning_internals import add_batch_dim, batch_level, is_batched, unwrap_batched
from gptlab.model.loss import LossParts, loss_parts

_LOCAL = threading.local()  # the group and member index of a member's thread (set by the fused launcher)
# The model config's fields each member applies on its own in a fused step: its loss terms (loss_parts per member),
# its dropout rate (_FusedForward), and the init keys, which act only when the member builds its model.
MEMBER_MODEL_FIELDS = ("z_loss", "dropout", "init_scale", "zero_init_proj", "mtp_weights", "mtp_weights_end")


@dataclass
class _Request:
    model: torch.nn.Module
    idx: torch.Tensor
    targets: torch.Tensor
    doc_ids: Optional[torch.Tensor]
    label_smoothing: float
    z_loss: float
    mtp: Optional[torch.Tensor] = None  # this step's multi-token weights (model/mtp.py), None without them
    autocast: tuple = field(default_factory=lambda: autocast_state())  # the member's precision, thread-local in torch
    rng: Optional[dict[str, Any]] = None  # the member's random streams (checkpoint/rng.py), advanced by its dropout
    result: Optional[tuple[LossParts, list[torch.Tensor]]] = None
    error: Optional[BaseException] = None
    done: bool = field(default=False)


class FusedGroup:
    """The rendezvous of k member threads. One member runs its own code at a time (its turn): Hydra's config and
    the process's random streams belong to one run at a time, so a member gives up its turn only where it hands its
    micro-batch to the group, taking its random streams with it, and gets them back with its turn. Each member thus
    draws every random number (init, dropout, a DataLoader's seed, a text sample) from its own streams in the order
    its run alone draws them. Once every member still training has given its micro-batch, the group runs them as
    one fused forward and backward (fused_step). `carried`: (get, set) of more process-wide state that each
    member takes along with its turn (the launcher's Hydra config)."""

    def __init__(self, size: int, carried: Sequence[tuple[Callable[[], Any], Callable[[Any], None]]] = ()) -> None:
        self.active = size  # members still training
        self._cond = threading.Condition()
        self._pending: dict[int, _Request] = {}
        self._turn = threading.Lock()
        self._holder: Optional[int] = None
        self._carried = list(carried)
        self._kept: dict[int, list[Any]] = {}  # what a member that gave up its turn had of `carried`
        self._spent: dict[int, float] = {}  # each member's seconds: its turns and its shares of rounds
        self._since: dict[int, float] = {}  # when the member holding the turn took it

    @contextlib.contextmanager
    def member(self, index: int) -> Iterator[None]:
        """The body of member `index`'s thread: it starts with its turn (its setup follows the previous member's
        first step); its end (finished, failed, skipped) leaves the group, so the others never wait for it."""
        self._take_turn(index)
        _LOCAL.member = (self, index)
        try:
            yield
        finally:
            _LOCAL.member = None
            self._give_turn(index)
            with self._cond:
                self.active -= 1
                self._run_round_if_complete()

    def _take_turn(self, index: int) -> None:
        self._turn.acquire()
        self._holder = index
        self._since[index] = time.perf_counter()
        for (_, put), value in zip(self._carried, self._kept.pop(index, [])):
            put(value)

    def _give_turn(self, index: int) -> None:
        if self._holder == index:
            self._spent[index] = self.seconds(index)
            self._since.pop(index, None)
            self._kept[index] = [get() for get, _ in self._carried]
            self._holder = None
            self._turn.release()

    def seconds(self, index: int) -> float:
        """Member `index`'s time so far: its own turns (its setup, data, optimizer steps, validation: only one member
        runs at a time) and, of each fused round it was in, its share (its tokens over the round's). The members'
        seconds add up to the group's time, less the moments nobody ran."""
        since = self._since.get(index)
        return self._spent.get(index, 0.0) + (0.0 if since is None else time.perf_counter() - since)

    def submit(self, index: int, request: _Request) -> tuple[LossParts, list[torch.Tensor]]:
        request.rng = rng_states()
        self._give_turn(index)
        with self._cond:
            self._pending[index] = request
            self._run_round_if_complete()
            while not request.done:
                self._cond.wait()
        self._take_turn(index)
        set_rng_states(request.rng)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _run_round_if_complete(self) -> None:
        """Under the condition's lock: compute the round once every active member has given its micro-batch (no
        member holds the turn then: each is waiting for this round)."""
        if not self._pending or len(self._pending) < self.active:
            return
        pending, self._pending = self._pending, {}
        rounds: dict[Any, list[int]] = {}
        for i in sorted(pending):
            rounds.setdefault(step_signature(pending[i]), []).append(i)
        for members in rounds.values():  # members whose steps differ in code or shape: a round each
            requests = [pending[i] for i in members]
            started = time.perf_counter()
            try:
                for request, result in zip(requests, fused_step(requests)):
                    request.result = result
            except BaseException as err:  # every member of the round sees the error, none waits forever
                for request in requests:
                    request.error = err
            seconds, tokens = time.perf_counter() - started, sum(r.idx.numel() for r in requests)
            for i, request in zip(members, requests):
                self._spent[i] = self._spent.get(i, 0.0) + seconds * request.idx.numel() / max(1, tokens)
        for request in pending.values():
            request.done = True
        self._cond.notify_all()


def step_signature(request: _Request) -> tuple:
    """What must be equal for two members' micro-batches to run as one fused step: the module tree with every plain
    attribute (a stage's attention window, an untied head's flags...), the config but for MEMBER_MODEL_FIELDS, the
    parameters' and buffers' names, shapes and dtypes (and the small integer buffers' values), and the inputs'
    shapes. Dropout rates are left out: _FusedForward applies each member's own."""
    model = request.model
    config = dataclasses.asdict(model.config) if dataclasses.is_dataclass(model.config) else {}
    attrs = tuple((name, type(module).__name__, tuple(sorted(
        (k, repr(v)) for k, v in vars(module).items()
        if not k.startswith("_") and isinstance(v, (int, float, str, bool, tuple, type(None)))
        and not (k == "dropout" or (k == "p" and isinstance(module, torch.nn.Dropout))))))
        for name, module in model.named_modules())
    tensors = tuple((name, tuple(t.shape), t.dtype, t.tolist() if not t.is_floating_point() and t.numel() <= 64 else 0)
                    for name, t in [*model.named_parameters(), *model.named_buffers()])
    shapes = tuple(None if t is None else tuple(t.shape) for t in (request.idx, request.targets, request.doc_ids))
    return (repr(sorted((k, repr(v)) for k, v in config.items() if k not in MEMBER_MODEL_FIELDS)), attrs, tensors,
            shapes, request.autocast)


AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple:
    """This thread's autocast (Lightning's precision plugin sets it around a member's training step): (device,
    enabled, dtype) for each device type."""
    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES)


def _autocast(state: tuple) -> contextlib.ExitStack:
    """The members' autocast, entered in whichever thread runs their round."""
    stack = contextlib.ExitStack()
    for device, enabled, dtype in state:
        if enabled or torch.is_autocast_enabled(device):
            stack.enter_context(torch.autocast(device, dtype=dtype, enabled=enabled))
    return stack


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

    with torch.enable_grad(), _FusedForward(requests).installed():
        with _autocast(requests[0].autocast):  # the forward and loss, as a member's training_step runs them
            # randomness="same": the only random draws are the members' own dropout calls (_FusedForward), on
            # unbatched slices, which vmap's default ("error") would refuse.
            logits = vmap(logits_of, in_dims=(0, 0, 0, 0 if with_docs else None), randomness="same")(
                params, buffers, idx, docs)
            parts = [loss_parts(logits_i, r.targets, r.model.config.vocab_size, r.label_smoothing, r.z_loss, r.mtp)
                     for logits_i, r in zip(logits.unbind(0), requests)]
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


def clock() -> float:
    """Seconds, for what a run measures of its own speed (fit_seconds, tokens/s, its events' times): in a fused
    member's thread its own share of the group's time (FusedGroup.seconds), else time.perf_counter()."""
    member = member_of_this_thread()
    return time.perf_counter() if member is None else member[0].seconds(member[1])


def fused_loss_fn(model: torch.nn.Module, eager: Any, group: FusedGroup, index: int) -> Any:
    """The member's loss function: training micro-batches through the group, validation (no grad) on its own."""
    def loss_fn(idx: torch.Tensor, targets: torch.Tensor, doc_ids: Optional[torch.Tensor] = None,
                label_smoothing: float = 0.0, z_loss: float = 0.0, mtp: Optional[torch.Tensor] = None) -> LossParts:
        if not torch.is_grad_enabled():
            return eager(idx, targets, doc_ids, label_smoothing, z_loss, mtp)
        parts, grads = group.submit(index, _Request(model, idx, targets, doc_ids, label_smoothing, z_loss, mtp))
        params = [p for _, p in model.named_parameters()]  # now: model.untie_at adds one mid-run
        objective = _GivenGradients.apply(parts.objective, grads, *params)
        return LossParts(objective, parts.ce, parts.z)

    return loss_fn


_SDPA, _DROPOUT, _LINEAR = F.scaled_dot_product_attention, F.dropout, F.linear
_NORMS = {"layer_norm": F.layer_norm, "rms_norm": F.rms_norm}


def _physical(t: Any, level: int) -> Any:
    """A vmapped tensor as the tensor that holds every member, member dim first (None: not vmapped, or not a
    tensor)."""
    if not isinstance(t, torch.Tensor) or not is_batched(t):
        return None
    inner, dim = unwrap_batched(t, level)
    return inner.movedim(dim, 0)


def _per_member(t: Any, level: int) -> Optional[tuple[torch.Tensor, ...]]:
    """A vmapped tensor as each member's slice (None: not vmapped). One unbind, whose backward stacks the k
    gradients: indexing each member would make k gradients of the whole tensor, zeros but for one slice."""
    physical = _physical(t, level)
    return None if physical is None else physical.unbind(0)


def _member_slices(values: tuple, level: int, members: int) -> list[tuple]:
    """`values` (the arguments of a call) as each member's: its slice of every vmapped tensor, the rest as given."""
    slices = [_per_member(v, level) for v in values]
    return [tuple(v if s is None else s[i] for v, s in zip(values, slices)) for i in range(members)]


def _with_streams(request: _Request, draw: Any) -> Any:
    """`draw()` on the member's own torch random streams (those it gave with its micro-batch), left advanced as
    its run alone leaves them; on the process's streams as they are where the member gave none (the bench)."""
    if request.rng is None:
        return draw()
    torch.set_rng_state(request.rng["torch"])
    if request.rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(request.rng["cuda"])
    out = draw()
    request.rng["torch"] = torch.get_rng_state()
    if request.rng["cuda"] and torch.cuda.is_available():
        request.rng["cuda"] = torch.cuda.get_rng_state_all()
    return out


class _FusedForward:
    """What runs outside torch.func's batching rules while the fused forward runs (the other member threads wait
    for its result meanwhile, so nothing else calls these functions):
    - attention: one kernel call with the members folded into the batch dim (torch has no batching rule for the CPU
      flash kernel and would loop over the members); per member, each on its own streams, with attention dropout;
    - the norms: once per member (torch.func's rule sums the gain's and bias's gradients in another order than
      the kernel a run alone calls: 1e-10 apart, which Muon's bf16 Newton-Schulz and clipping make visible);
    - dropout: once per member, with its own model.dropout, on its own random streams, so each member draws the
      masks its run alone draws. Every dropout in the model is model.dropout (nn.Dropout and attention's
      dropout_p), so the call's rate is member 0's and each member's own replaces it."""

    def __init__(self, requests: list[_Request]) -> None:
        self.requests = requests
        training = requests[0].model.training  # Lightning's train mode; its rates apply only in it
        self.rates = [float(r.model.config.dropout) if training else 0.0 for r in requests]

    def _rate(self, p: float) -> None:
        if p not in (0.0, self.requests[0].model.config.dropout):
            raise RuntimeError(f"fused forward: a dropout rate {p} that is not model.dropout "
                               f"({self.requests[0].model.config.dropout}): "
                               "execution/fused.py gives each member its own model.dropout and must learn this one")

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
             dropout_p: float = 0.0, **kwargs: Any) -> torch.Tensor:
        if not is_batched(q):
            return _SDPA(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, **kwargs)
        level = batch_level(q)
        if any(self.rates) or (attn_mask is not None and is_batched(attn_mask)):
            self._rate(dropout_p)
            slices = _member_slices((q, k, v, attn_mask), level, len(self.requests))
            out = torch.stack([
                _with_streams(r, lambda s=s, p=p: _SDPA(*s[:3], attn_mask=s[3], dropout_p=p, **kwargs))
                for r, s, p in zip(self.requests, slices, self.rates)])
            return add_batch_dim(out, 0, level)
        physical = [_physical(t, level) for t in (q, k, v)]
        members = next(p.shape[0] for p in physical if p is not None)
        physical = [p if p is not None else t.expand(members, *t.shape) for p, t in zip(physical, (q, k, v))]
        if attn_mask is not None and attn_mask.dim() == q.dim() and attn_mask.shape[0] != 1:
            # a mask of its own per batch row (local attention's query blocks): each member's rows get theirs
            attn_mask = attn_mask.expand(members, *attn_mask.shape).reshape(-1, *attn_mask.shape[1:])
        out = _SDPA(*(p.reshape(-1, *p.shape[2:]) for p in physical), attn_mask=attn_mask, **kwargs)
        return add_batch_dim(out.reshape(members, -1, *out.shape[1:]), 0, level)

    def dropout(self, x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        if not is_batched(x):
            return _DROPOUT(x, p, training, inplace)
        self._rate(p)
        level = batch_level(x)
        xs = _per_member(x, level)
        out = torch.stack([_with_streams(r, lambda i=i, rate=rate: _DROPOUT(xs[i], rate, training))
                           for i, (r, rate) in enumerate(zip(self.requests, self.rates))])
        return add_batch_dim(out, 0, level)

    @staticmethod
    def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Every member's linear as one batched matmul with its bias added in the kernel (torch.baddbmm, HFTA's
        way). torch.func's own rule for it is a matmul and a separate add of the bias (k x B x T x out more
        memory traffic, each way)."""
        if not (is_batched(x) and is_batched(weight)) or batch_level(x) != batch_level(weight):
            return _LINEAR(x, weight, bias)
        level = batch_level(x)
        xs, w = _physical(x, level), _physical(weight, level)
        flat = xs.reshape(xs.shape[0], -1, xs.shape[-1])
        if bias is None:
            out = torch.bmm(flat, w.transpose(1, 2))
        else:
            b = _physical(bias, level) if is_batched(bias) else bias.expand(xs.shape[0], -1)
            out = torch.baddbmm(b.unsqueeze(1), flat, w.transpose(1, 2))
        return add_batch_dim(out.reshape(*xs.shape[:-1], out.shape[-1]), 0, level)

    @staticmethod
    def norm(name: str) -> Any:
        norm = _NORMS[name]

        def per_member(x: torch.Tensor, shape: Any, weight: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
            if not is_batched(x):
                return norm(x, shape, weight, *args, **kwargs)
            level = batch_level(x)
            xs = _per_member(x, level)
            rest = list(args)
            bias = rest.pop(0) if name == "layer_norm" and rest else kwargs.pop("bias", None)
            gains, biases = _per_member(weight, level), _per_member(bias, level)
            out = torch.stack([
                norm(xs[i], shape, weight if gains is None else gains[i],
                     *([bias if biases is None else biases[i]] if name == "layer_norm" else []), *rest, **kwargs)
                for i in range(len(xs))])
            return add_batch_dim(out, 0, level)

        return per_member

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        mine = {"scaled_dot_product_attention": self.sdpa, "dropout": self.dropout, "linear": self.linear,
                **{name: self.norm(name) for name in _NORMS}}
        saved = {name: getattr(F, name) for name in mine}
        for name, fn in mine.items():
            setattr(F, name, fn)
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(F, name, fn)
