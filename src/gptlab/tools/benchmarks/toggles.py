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

from gptlab.model import GPT, GPTConfig, next_token_loss
from gptlab.model.attention import CausalSelfAttention
from gptlab.train.callbacks.stability import block_grad_norms, block_weights, forward_probes, update_ratios

NANO = dict(vocab_size=257, block_size=256, n_layer=4, n_head=4, n_embd=128)
VARIANTS: dict[str, dict] = {
    "learned (baseline)": {},
    "rope": {"pos_emb": "rope"},
    "alibi": {"pos_emb": "alibi"},
    "qk_norm": {"qk_norm": True},
    "rope+qk_norm": {"pos_emb": "rope", "qk_norm": True},
    "rmsnorm": {"norm_type": "rmsnorm"},
    "swiglu": {"activation": "swiglu"},
    "llama (rope+rmsnorm+swiglu)": {"pos_emb": "rope", "norm_type": "rmsnorm", "activation": "swiglu"},
}


def _step_fn(fields: dict, batch: int, probes: bool = False) -> Callable[[], None]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**NANO, **fields))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 257, (batch, NANO["block_size"]))
    y = torch.randint(0, 257, (batch, NANO["block_size"]))

    def step() -> None:
        next_token_loss(model(x), y).backward()
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
    steps["probed step"] = _step_fn({}, batch, probes=True)
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
    layers = {name: CausalSelfAttention(GPTConfig(**NANO, **VARIANTS[name])) for name in names}
    best = {name: float("inf") for name in names}
    for _ in range(repeats):
        for name, layer in layers.items():
            start = time.perf_counter()
            layer(x).sum().backward()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best
