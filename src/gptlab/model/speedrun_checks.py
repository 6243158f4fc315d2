"""The checks of the speedrun's model-side keys (GPTConfig's last block; docs/model.md, "The speedrun's choices"):
each field's own check, then the rules that need n_layer or another field. Every message names the key and a value
that works."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gptlab.errors import ConfigError, is_int, is_number

PROJECTIONS = ("attn", "mlp")  # zero_init_proj: W_O of the attention, f_L of the MLP


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def projections(field: str, value: Any) -> None:
    if not _is_list(value) or any(p not in PROJECTIONS for p in value) or len(set(value)) != len(value):
        raise ConfigError(f"{field}={value!r} must be a list of distinct names from: {', '.join(PROJECTIONS)}; "
                          f"e.g. {field}=[attn,mlp], or {field}=[] for GPT-2's init.")


def layer_list(field: str, value: Any) -> None:
    if not _is_list(value) or not all(is_int(i) and i >= 0 for i in value) or len(set(value)) != len(value):
        raise ConfigError(f"{field}={value!r} must be a list of distinct block indices >= 0, e.g. {field}=[1], "
                          f"or {field}=[] for none.")


def skip_pairs(field: str, value: Any) -> None:
    ok = _is_list(value) and all(_is_list(p) and len(p) == 2 and all(is_int(i) and i >= 0 for i in p) and p[0] < p[1]
                                 for p in value)
    if not ok:
        raise ConfigError(f"{field} (given {value!r}) must be a list of [from, to] block pairs with from < to; leave "
                          f"{field} out for none.")


def weights(field: str, value: Any) -> None:
    if value is None and field.endswith("_end"):
        return
    if not _is_list(value) or not all(is_number(w) and w >= 0 for w in value):
        raise ConfigError(f"{field}={value!r} must be a list of weights >= 0, one per extra token ahead, e.g. "
                          f"{field}=[0.5,0.25], or {field}=[] for none.")


def sigmoid_cap(field: str, value: Any) -> None:
    if value is None:
        return
    if not _is_list(value) or len(value) != 3 or not all(is_number(v) for v in value) or value[0] <= 0 \
            or value[2] <= 0:
        raise ConfigError(f"{field}={value!r} must be [A, B, C] with A > 0 and C > 0 (A * sigmoid((z + B) / C)), "
                          f"e.g. the record's {field}=[23,5,7.5], or {field}=null for no cap.")


def in_range(cfg: Any) -> None:
    """Every block index of the layer lists and skips is a block of the model."""
    M = cfg.n_layer
    for name in ("value_embed_layers", "no_attn_layers", "no_mlp_layers"):
        outside = [i for i in getattr(cfg, name) if i >= M]
        if outside:
            inside = [i for i in getattr(cfg, name) if i < M]
            raise ConfigError(f"model.{name}={list(getattr(cfg, name))} names block(s) {outside}, but model.n_layer="
                              f"{M} has blocks 0..{M - 1}; use model.{name}=[{','.join(map(str, inside))}].")
    outside = [list(p) for p in cfg.skips if p[1] >= M]
    if outside:
        raise ConfigError(f"model.skips (given {[list(p) for p in cfg.skips]}) reaches block(s) past the last, {M - 1} "
                          f"(model.n_layer={M}): keep the pairs whose blocks are 0..{M - 1}, or leave model.skips out "
                          "for none.")


def value_embeds_need_attention(cfg: Any) -> None:
    both = sorted(set(cfg.value_embed_layers) & set(cfg.no_attn_layers))
    if both:
        rest = [i for i in cfg.value_embed_layers if i not in both]
        raise ConfigError(f"model.value_embed_layers={list(cfg.value_embed_layers)} adds value embeddings to block(s) "
                          f"{both}, which model.no_attn_layers leaves without attention (no values to add to); use "
                          f"model.value_embed_layers=[{','.join(map(str, rest))}].")


def one_logit_cap(cfg: Any) -> None:
    if cfg.logit_softcap is not None and cfg.logit_sigmoid_cap is not None:
        raise ConfigError(f"model.logit_softcap={cfg.logit_softcap} and model.logit_sigmoid_cap="
                          f"{list(cfg.logit_sigmoid_cap)} both cap the logits; keep one: model.logit_softcap=null "
                          "(the record's sigmoid form) or model.logit_sigmoid_cap=null (Gemma 2's tanh).")


def mtp_schedule_lengths(cfg: Any) -> None:
    end = cfg.mtp_weights_end
    if end and len(end) != len(cfg.mtp_weights):  # [] is null's other spelling: no ramp
        raise ConfigError(f"model.mtp_weights_end={list(end)} has {len(end)} weight(s) but model.mtp_weights="
                          f"{list(cfg.mtp_weights)} has {len(cfg.mtp_weights)}: one end per start; use "
                          f"model.mtp_weights_end=[{','.join(['0.0'] * len(cfg.mtp_weights))}] (ramp to 0) or "
                          "model.mtp_weights_end=null (constant).")


def init_scale_is_standard(cfg: Any) -> None:
    if cfg.init_scale is not None and cfg.parametrization == "mup":
        raise ConfigError(f"model.init_scale={cfg.init_scale} sets the hidden init, which "
                          "model.parametrization=mup sets by the width; use model.init_scale=null under muP, or "
                          "model.parametrization=standard.")


RULES = (in_range, value_embeds_need_attention, one_logit_cap, mtp_schedule_lengths, init_scale_is_standard)


# The keys that add parts or change the function (init_scale, zero_init_proj and the multi-token loss change only how
# training starts or what it minimises: such a model is still a GPT-2), each with its off value.
STRUCTURE_OFF = (("value_embed_layers", []), ("x0_mix", False), ("skips", []), ("residual_scalars", False),
                 ("smear", False), ("logit_sigmoid_cap", None), ("no_attn_layers", []), ("no_mlp_layers", []),
                 ("bigram_vocab", 0))


def speedrun_structure(cfg: Any) -> str:
    """`model.<key>=<value>` of the first speedrun part the model has ('' for none): what an export format without
    it names when it refuses the model."""
    for name, off in STRUCTURE_OFF:
        value = getattr(cfg, name)
        if (list(value) if isinstance(value, (list, tuple)) else value) != off:
            return f"model.{name}={value!r}"
    return ""
