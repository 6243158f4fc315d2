"""Cost of the post-GPT-3 toggles per training step, and of the stability probes, on the nano shape.

One training step = forward, next-token loss, backward and an AdamW step of the whole model (nano: 4 layers,
H=4, D=128, T=256, the 257-id byte vocabulary). Variants are timed interleaved (baseline, rope, alibi, ...
then again), best of N each, so load from other processes hits them alike and only ever adds time; ratios
are to the learned-position baseline measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gptlab.model import GPT, GPTConfig
from gptlab.model.attention import CausalSelfAttention
from gptlab.model.loss import loss_parts
from gptlab.tools.benchmarks.toggle_variants import ATTENTION_VARIANTS, VARIANTS, Variant
from gptlab.train.callbacks.stability import block_grad_norms, block_weights, forward_probes, update_ratios
from gptlab.train.normuon import NorMuonAdam, speedrun_groups

NANO = dict(vocab_size=257, block_size=256, n_layer=4, n_head=4, n_embd=128)


def _optimizer(name: str, model: GPT) -> torch.optim.Optimizer:
    if name == "normuon":
        return NorMuonAdam(speedrun_groups(model, 0.0), lr=0.06, embed_lr=0.6, head_lr=0.008, scalar_lr=0.04)
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


def _step_fn(variant: Variant, batch: int, probes: bool = False) -> Callable[[], None]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**NANO, **variant.fields))
    optimizer = _optimizer(variant.optimizer, model)
    rows, length = max(1, round(batch * variant.rows)), variant.seq_len or NANO["block_size"]
    x = torch.randint(0, 257, (batch, NANO["block_size"]))[:rows].reshape(-1, length)
    y = torch.randint(0, 257, (batch, NANO["block_size"]))[:rows].reshape(-1, length)

    mtp = torch.tensor(variant.fields["mtp_weights"]) if variant.fields.get("mtp_weights") else None

    def step() -> None:
        loss_parts(model(x), y, mtp=mtp).objective.backward()
        if probes:  # what StabilityProbes adds to a probed step
            block_grad_norms(model)
            before = block_weights(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if probes:
            update_ratios(before, model)
            forward_probes(model, x[:2])

    return step


def measure(names: list[str], batch: int = 8, repeats: int = 5) -> dict[str, float]:
    """Best step time in ms per variant, plus `probed step` (the baseline with every probe run)."""
    steps = {name: _step_fn(VARIANTS[name], batch) for name in names}
    steps["probed step"] = _step_fn(Variant(), batch, probes=True)
    for step in steps.values():  # warm-up: allocator, thread pools, cached masks
        step()
    best = {name: float("inf") for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def measure_attention_layer(names: list[str], batch: int = 4, repeats: int = 60) -> dict[str, float]:
    """Best forward+backward ms of one nano attention layer per variant: the part of the step the position and
    QK-norm toggles touch, short enough to repeat often, so best-of-N settles even on a loaded machine."""
    x = torch.randn(batch, NANO["block_size"], NANO["n_embd"], requires_grad=True)
    names = [name for name in names if name in ATTENTION_VARIANTS]
    layers = {name: CausalSelfAttention(GPTConfig(**NANO, **VARIANTS[name].fields)) for name in names}
    best = {name: float("inf") for name in names}
    for _ in range(repeats):
        for name, layer in layers.items():
            start = time.perf_counter()
            layer(x).sum().backward()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best
