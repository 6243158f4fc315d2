"""The variants scripts/bench_toggles.py times (gptlab.tools.benchmarks.toggles), apart from the benchmark: its
--variants choices are read without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


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

