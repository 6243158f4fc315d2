"""Cost of the post-GPT-3 toggles per training step, and of the stability probes, on the nano shape.

One training step = forward, next-token loss, backward and an AdamW step of the whole model (nano: 4 layers,
H=4, D=128, T=256, the 257-id byte vocabulary). Variants are timed interleaved (baseline, rope, alibi, ...
then again), best of N each, so load from other processes hits them alike and only ever adds time; ratios
are to the learned-position baseline measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

import torch

from gptlab.model import GPT, GPTConfig
from gptlab.model.attention import CausalSelfAttention
from gptlab.model.loss import loss_parts
from gptlab.train.callbacks.stability import block_grad_norms, block_weights, forward_probes, update_ratios
from gptlab.train.normuon import NorMuonAdam, speedrun_groups

NANO = dict(vocab_size=257, block_size=256, n_layer=4, n_head=4, n_embd=128)


@dataclass(frozen=True)
class Variant:
    """A model's fields, and how a training step feeds and steps it (the speedrun's stages and optimizer)."""

    fields: dict = field(default_factory=dict)
    optimizer: str = "adamw"  # or "normuon" (optimizer=normuon, with its defaults)
    seq_len: Optional[int] = None  # a stage of stages.seq_lens: each row cut into sequences of this length
    rows: float = 1.0  # a stage of stages.batch_sizes, as a share of the batch's rows


VARIANTS: dict[str, Variant] = {
    "learned (baseline)": Variant(),
    "rope": Variant({"pos_emb": "rope"}),
    "alibi": Variant({"pos_emb": "alibi"}),
    "qk_norm": Variant({"qk_norm": True}),
    "rope+qk_norm": Variant({"pos_emb": "rope", "qk_norm": True}),
    "rmsnorm": Variant({"norm_type": "rmsnorm"}),
    "swiglu": Variant({"activation": "swiglu"}),
    "llama (rope+rmsnorm+swiglu)": Variant({"pos_emb": "rope", "norm_type": "rmsnorm", "activation": "swiglu"}),
    # The speedrun's training-side choices (docs/model.md, "Speedrun training schedules"), one stage each.
    "untied head (untie_at, after)": Variant({"tie_weights": False}),
    "local+short w=128 (windows)": Variant({"attn_pattern": ["local", "short"], "attn_window": 128}),
    "local+short w=64 (windows)": Variant({"attn_pattern": ["local", "short"], "attn_window": 64}),
    "seq_len 64 (seq_lens)": Variant(seq_len=64),
    "half batch (batch_sizes)": Variant(rows=0.5),
    "normuon (optimizer)": Variant(optimizer="normuon"),
}
ATTENTION_VARIANTS = [name for name, v in VARIANTS.items()  # measure_attention_layer: those that change the layer
                      if v == Variant(v.fields) and "tie_weights" not in v.fields]
# The speedrun's model-side choices (docs/model.md, "The speedrun's choices"), each alone on the nano baseline (its
# tanh GELU), at the layer lists model=speedrun_nano uses; then all of them (model=speedrun_nano's keys).
SPEEDRUN = {
    "relu2": {"activation": "relu2"},
    "zero_init_proj+init_scale": {"zero_init_proj": ["mlp"], "init_scale": 0.5},
    "value_embeds": {"value_embed_layers": [0, 3]},
    "value_embeds+gate": {"value_embed_layers": [0, 3], "value_embed_gate": True},
    "x0_mix": {"x0_mix": True},
    "skips": {"skips": [[1, 2]]},
    "residual_scalars": {"residual_scalars": True},
    "smear": {"smear": True},
    "logit_sigmoid_cap": {"logit_sigmoid_cap": [23.0, 5.0, 7.5]},
    "no_attn_layers=[2]": {"no_attn_layers": [2]},
    "bigram_vocab=1285": {"bigram_vocab": 1285},
    "mtp_weights=[.5,.25]": {"mtp_weights": [0.5, 0.25]},
}
SPEEDRUN_NANO = {"pos_emb": "rope", "rope_fraction": 0.5, "rope_theta": 1024.0, "qk_norm": True, "norm_type": "rmsnorm",
                 "attn_bias": False, "mlp_bias": False, "tie_weights": False,
                 **{k: v for fields in SPEEDRUN.values() for k, v in fields.items()}}
VARIANTS.update({name: Variant(fields) for name, fields in SPEEDRUN.items()})
VARIANTS["speedrun_nano (all)"] = Variant(SPEEDRUN_NANO)


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
