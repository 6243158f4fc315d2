"""One training step (forward, loss, backward, clip, AdamW) of gptlab's GPT vs a hand-written reference GPT.

Both models start from the same weights (the reference copies gptlab's) and see the same batch, and their
first losses must agree: the benchmark compares equal work, so any ratio is overhead, not arithmetic.
Timing: every contender runs `steps` steps per round; rounds interleave the contenders (so load from other
processes hits all of them alike), and each keeps its best round (noise only ever adds time).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from gptlab.model import GPT, GPTConfig, next_token_loss
from gptlab.tools.benchmarks.reference_gpt import ReferenceGPT
from gptlab.tools.benchmarks.train_step_shapes import Shape
from gptlab.train.optim import adamw, weight_decay_groups

Step = Callable[[], torch.Tensor]


def _step_fn(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, loss_fn: Callable[[], torch.Tensor]
             ) -> Step:
    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss.detach()

    return step


def build(shape: Shape, which: str, compile: bool, seed: int = 0) -> tuple[Step, torch.Tensor]:
    """A step closure for `which` (gptlab | reference | reference again: a second, separate copy of the reference,
    whose ratio to the first is the noise of the run) and the loss of its first forward (same for all)."""
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=shape.vocab_size, block_size=shape.block_size, n_layer=shape.n_layer,
                    n_head=shape.n_head, n_embd=shape.n_embd)
    gpt = GPT(cfg)
    x = torch.randint(0, shape.vocab_size, (shape.batch, shape.block_size))
    y = torch.randint(0, shape.vocab_size, (shape.batch, shape.block_size))
    model: torch.nn.Module
    if which not in ("gptlab", "reference", "reference again"):
        raise ValueError(f"no step contender {which!r}")
    if which == "gptlab":
        model = gpt
        forward = torch.compile(gpt, dynamic=False) if compile else gpt  # as GPTLitModule does

        def loss_fn() -> torch.Tensor:
            return next_token_loss(forward(x), y)
    else:
        model = ReferenceGPT(shape.vocab_size, shape.block_size, shape.n_layer, shape.n_head, shape.n_embd)
        model.load_from(gpt)
        forward = torch.compile(model, dynamic=False) if compile else model

        def loss_fn() -> torch.Tensor:
            return forward(x, y)

    with torch.no_grad():
        first = loss_fn()
    optimizer = adamw(weight_decay_groups(model, 0.1), lr=1e-4, weight_decay=0.1)
    return _step_fn(list(model.parameters()), optimizer, loss_fn), first


# Library kernels that torch.compile (inductor) calls as they are on a CPU: it fuses the elementwise work around them
# (GELU, LayerNorm, residual adds, the optimizer's arithmetic) but not these.
LIBRARY_KERNELS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention")


def library_kernel_share(step: Step, steps: int = 3) -> float:
    """The share of an eager step's CPU time spent inside LIBRARY_KERNELS (forward and backward), from the
    profiler. 1 / share bounds what compiling can gain (Amdahl): even free elementwise work leaves these."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    return sum(e.self_cpu_time_total for e in events if e.key.startswith(LIBRARY_KERNELS)) / total


def time_steps(step: Step, steps: int) -> float:
    """Mean seconds per step over `steps` steps."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def compare(contenders: dict[str, Step], steps: int, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Best-of-`repeats` mean step time per contender, rounds interleaved."""
    for step in contenders.values():
        for _ in range(warmup):  # compiles a compiled one
            step()
    best = {name: float("inf") for name in contenders}
    for _ in range(repeats):
        for name, step in contenders.items():
            best[name] = min(best[name], time_steps(step, steps))
    return best
