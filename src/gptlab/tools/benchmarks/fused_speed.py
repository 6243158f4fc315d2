"""Sweep throughput of k fused members (execution/fused.py) against the same k jobs' steps one after another, and
against the other implementation issue 42 names: batched modules (tools/benchmarks/fused_batched.py).

One training step per member: forward, loss, backward, clipping at 1.0 and its own AdamW step. Fused: one
`fused_step` for all k (the vmapped forward and backward the launcher's groups run) and then each member's own
clipping and optimizer step, as each member's Lightning loop does; alone: each member's own step in turn. Both run
interleaved in one process, repeatedly, each keeping its best time (other processes only ever add time). Tokens/s
is summed over members. The bound is the time of k fused steps at k=1 (one member each): a fused step of k members
that takes less than that is what fusing buys.
Memory is the step's own: parameters, gradients and AdamW's two moments of all k, plus the tensors autograd saves
for backward at the step's peak (the same count on both sides: CUDA's allocator peak where there is a GPU).
Lightning's own per-step overhead is paid per member on both sides of a real sweep and is not in these rows.
`physics` says what bounds a step on this device: its matmul FLOP/s against the step's FLOPs, and its per-op cost
against the number of ops a step dispatches."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gptlab.execution.fused import _Request, fused_step
from gptlab.lightning_internals import dispatch_mode
from gptlab.model import GPT, GPTConfig
from gptlab.model.accounting import training_flops_per_token
from gptlab.model.loss import model_loss
from gptlab.tools.benchmarks.fused_batched import batched_step, supports
from gptlab.tools.benchmarks.fused_shapes import NANO, SHAPES
from gptlab.train.optim import adamw, weight_decay_groups


@dataclass
class Row:
    k: int
    alone_s: float
    fused_s: float
    tokens: int
    alone_bytes: int
    fused_bytes: int
    batched_s: Optional[float]  # None: the batched-modules prototype does not write out this architecture


class _Members:
    def __init__(self, k: int, batch: int, shape: dict, device: torch.device) -> None:
        cfg = GPTConfig(**shape)
        self.models, self.optimizers = [], []
        for seed in range(k):
            torch.manual_seed(seed)
            model = GPT(cfg).to(device)
            self.models.append(model)
            self.optimizers.append(adamw(weight_decay_groups(model, 0.1), lr=1e-3 * (seed + 1)))
        gen = torch.Generator().manual_seed(0)
        self.batches = [(torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=gen).to(device),
                         torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=gen).to(device))
                        for _ in range(k)]
        self.tokens = k * batch * cfg.block_size
        self.can_batch = supports(self.models[0])

    def _finish(self, i: int) -> None:
        torch.nn.utils.clip_grad_norm_(self.models[i].parameters(), 1.0, foreach=True)
        self.optimizers[i].step()
        self.optimizers[i].zero_grad(set_to_none=True)

    def alone(self) -> None:
        for i, (model, (x, y)) in enumerate(zip(self.models, self.batches)):
            model_loss(model, x, y).objective.backward()
            self._finish(i)

    def fused(self) -> None:
        results = fused_step([_Request(m, x, y, None, 0.0, 0.0) for m, (x, y) in zip(self.models, self.batches)])
        for i, (model, (_, grads)) in enumerate(zip(self.models, results)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g
            self._finish(i)

    def batched(self) -> None:
        for i, (model, grads) in enumerate(zip(self.models, batched_step(self.models, self.batches))):
            for p, g in zip(model.parameters(), grads):
                p.grad = g
            self._finish(i)

    def state_bytes(self) -> int:
        return sum(4 * p.numel() * p.element_size() for m in self.models for p in m.parameters())  # p, grad, 2 moments


def _saved_bytes(step: Callable[[], None], device: torch.device) -> int:
    """The step's peak of tensors saved for backward (CPU), or the allocator's peak (CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(seen.values())


def _timed(step: Callable[[], None], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def measure(ks: list[int], batch: int, repeats: int, device: torch.device, shape: dict = NANO,
            bf16: bool = False) -> list[Row]:
    """One Row per k: the best of `repeats` interleaved timings of each side, after one warm-up step each. `bf16`:
    every side under bf16 autocast, as gptlab's GPU trainer (trainer=gpu, bf16-mixed) trains."""
    groups = {k: _Members(k, batch, shape, device) for k in ks}
    sides = ("alone", "fused", "batched")
    best = {(k, side): float("inf") for k in ks for side in sides}
    memory = {}
    mixed = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with mixed:
        for k, members in groups.items():
            cuda = device.type == "cuda"
            memory[k] = tuple(_saved_bytes(step, device) + (0 if cuda else members.state_bytes())
                              for step in (members.alone, members.fused))
        for repeat in range(repeats):
            for k, members in groups.items():
                mine = sides if members.can_batch else sides[:2]
                for side in mine[repeat % len(mine):] + mine[:repeat % len(mine)]:  # each side first in turn
                    best[k, side] = min(best[k, side], _timed(getattr(members, side), device))
    return [Row(k, best[k, "alone"], best[k, "fused"], groups[k].tokens, *memory[k],
                best[k, "batched"] if groups[k].can_batch else None) for k in ks]


def table(rows: list[Row]) -> list[str]:
    """Markdown rows: tokens/s of both sides and their ratio, the fused step's time against the bound (k times the
    fused step at k=1: what fusing saves over k steps of one member), and memory."""
    one = next((r for r in rows if r.k == 1), None)
    lines = ["| k | alone tokens/s | fused (vmap) tokens/s | fused / alone | batched modules tokens/s | "
             "batched / alone | fused step | bound: k x fused k=1 | memory alone | memory fused |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        alone, fused = r.tokens / r.alone_s, r.tokens / r.fused_s
        batched = "- | -" if r.batched_s is None else \
            f"{r.tokens / r.batched_s:,.0f} | {r.tokens / r.batched_s / alone:.2f}x"
        bound = f"{r.k * one.fused_s * 1e3:,.0f} ms" if one else "-"
        lines.append(f"| {r.k} | {alone:,.0f} | {fused:,.0f} | {fused / alone:.2f}x | {batched} | "
                     f"{r.fused_s * 1e3:,.0f} ms | {bound} | "
                     f"{r.alone_bytes / 2**20:,.0f} MiB | {r.fused_bytes / 2**20:,.0f} MiB |")
    return lines


class _OpCount(dispatch_mode()):
    """The aten ops a step dispatches (forward, backward and optimizer alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops += 1
        return func(*args, **(kwargs or {}))


def physics(batch: int, repeats: int, device: torch.device, shape: dict = NANO) -> list[str]:
    """What limits one member's step here: this device's fp32 matmul rate at the step's largest matmul shape, alone
    and as one bmm of 8 members; the share of the step's own time in matmul and attention kernels (arithmetic that
    fusing keeps, so 1 / that share bounds what fusing can gain where the bmm is no faster per FLOP); and the ops
    it dispatches at the measured cost of a 1-element op."""
    cfg = GPTConfig(**shape)
    tokens = batch * cfg.block_size
    a = torch.randn(tokens, cfg.n_embd, device=device)
    w = torch.randn(4 * cfg.n_embd, cfg.n_embd, device=device)
    flops_mm = 2 * tokens * cfg.n_embd * 4 * cfg.n_embd
    mm = min(_timed(lambda: a @ w.T, device) for _ in range(20 * repeats))
    a8, w8 = a.expand(8, *a.shape).contiguous(), w.expand(8, *w.shape).contiguous()
    bmm = min(_timed(lambda: torch.bmm(a8, w8.transpose(1, 2)), device) for _ in range(5 * repeats)) / 8
    one, two = torch.ones(1, device=device), torch.ones(1, device=device)
    per_op = min(_timed(lambda: [torch.add(one, two) for _ in range(1000)], device) for _ in range(repeats)) / 1000
    members = _Members(1, batch, shape, device)
    with _OpCount() as counted:
        members.alone()
    step = min(_timed(members.alone, device) for _ in range(repeats))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiled:
        members.alone()
    own = {e.key: e.self_cpu_time_total for e in profiled.key_averages()}
    total = sum(own.values())
    arithmetic = sum(t for name, t in own.items() if "mm" in name or "attention" in name) / total
    top = ", ".join(f"{name} {t / total:.0%}" for name, t in sorted(own.items(), key=lambda kv: -kv[1])[:4])
    step_flops = training_flops_per_token(cfg)["total"] * tokens
    overhead = counted.ops * per_op / step
    name = next((n for n, values in SHAPES.items() if values == shape), "this shape")
    return [f"physics ({name}, micro-batch {batch}, one member's step of {step * 1e3:,.0f} ms, {step_flops / 1e9:,.2f} "
            f"GFLOP): fp32 matmul here {flops_mm / mm / 1e9:,.1f} GFLOP/s ({tokens}x{cfg.n_embd} @ "
            f"{cfg.n_embd}x{4 * cfg.n_embd}), {flops_mm / bmm / 1e9:,.1f} GFLOP/s per member as one bmm of 8; matmul "
            f"and attention kernels are {arithmetic:.0%} of the step's own time (torch.profiler: {top}); "
            f"{counted.ops:,} ops x {per_op * 1e6:.1f} us = {overhead:.0%} of it is dispatch cost. Fused members still "
            f"run every matmul and attention kernel, at no better rate per FLOP where the bmm's is lower: k fused "
            f"members are at most {1 / arithmetic:.2f}x the members one after another here, with nothing else left."]
