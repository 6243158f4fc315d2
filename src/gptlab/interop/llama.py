"""Hugging Face `LlamaForCausalLM` directories in and out: the LLaMA shape of gptlab's toggles.

LLaMA is GPT-2's pre-LN block with pos_emb=rope, norm_type=rmsnorm, activation=swiglu, no biases and an untied
head. Its RoPE pairs dimension i with i + D_K/2 (rotate_half), the layout gptlab's rope.py uses, so HF's stored
W_Q and W_K load as they are, with no permutation (only Meta's original checkpoints interleave pairs, and HF's
conversion script permutes those once when it writes the HF format). Separate q/k/v projections are
concatenated into gptlab's fused qkv; gate_proj and up_proj are stacked into mlp.layers.0 ([gate ‖ up]).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from gptlab.errors import ConfigError
from gptlab.model.config import GPTConfig
from gptlab.model.sparse_attention import is_sparse
from gptlab.model.speedrun_checks import speedrun_structure

PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def _refuse(option: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"llama config option {option}={value!r} is not supported: {why}.")


def _rope_theta(config: dict[str, Any]) -> float:
    """transformers 5 keeps RoPE settings in `rope_parameters`, 4.x in `rope_theta` and `rope_scaling`."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise _refuse("rope_type", kind, "gptlab implements plain RoPE (rope_type default), no context extension")
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def convert_llama(config: dict[str, Any], hf: dict[str, torch.Tensor]) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """A GPTConfig and the state dict `GPT(cfg)` loads strictly, from config.json and the stored weights."""
    heads = config["num_attention_heads"]
    if config.get("num_key_value_heads", heads) != heads:
        raise _refuse("num_key_value_heads", config["num_key_value_heads"],
                      f"gptlab has no grouped-query attention; it needs num_key_value_heads = {heads}")
    if config.get("hidden_act", "silu") != "silu":
        raise _refuse("hidden_act", config["hidden_act"], "LLaMA's MLP is SwiGLU (silu)")
    if config.get("pretraining_tp", 1) != 1:
        raise _refuse("pretraining_tp", config["pretraining_tp"], "use the merged weights (pretraining_tp=1)")
    tied = config.get("tie_word_embeddings", False)
    bias, mlp_bias = config.get("attention_bias", False), config.get("mlp_bias", False)
    cfg = GPTConfig(
        vocab_size=config["vocab_size"], block_size=config["max_position_embeddings"],
        n_layer=config["num_hidden_layers"], n_head=heads, n_embd=config["hidden_size"],
        head_dim=config.get("head_dim") or config["hidden_size"] // heads, d_ff=config["intermediate_size"],
        norm="pre", final_norm=True, pos_emb="rope", rope_theta=_rope_theta(config), norm_type="rmsnorm",
        activation="swiglu", tie_weights=tied, attn_bias=bias, mlp_bias=mlp_bias,
        dropout=config.get("attention_dropout", 0.0), layer_norm_eps=config.get("rms_norm_eps", 1e-6),
    )
    hf = {k.removeprefix("model."): v for k, v in hf.items()}
    state = {"tok_emb.weight": hf["embed_tokens.weight"], "final_norm.weight": hf["norm.weight"]}
    state["head.weight"] = hf["embed_tokens.weight"] if tied or "lm_head.weight" not in hf else hf["lm_head.weight"]
    for i in range(cfg.n_layer):
        src, dst = f"layers.{i}.", f"blocks.{i}."
        attn, mlp = src + "self_attn.", src + "mlp."
        state[dst + "attn.qkv.weight"] = torch.cat([hf[f"{attn}{p}.weight"] for p in PROJECTIONS])
        state[dst + "attn.out.weight"] = hf[attn + "o_proj.weight"]
        state[dst + "mlp.layers.0.weight"] = torch.cat([hf[mlp + "gate_proj.weight"], hf[mlp + "up_proj.weight"]])
        state[dst + "mlp.layers.2.weight"] = hf[mlp + "down_proj.weight"]
        if bias:
            state[dst + "attn.qkv.bias"] = torch.cat([hf[f"{attn}{p}.bias"] for p in PROJECTIONS])
            state[dst + "attn.out.bias"] = hf[attn + "o_proj.bias"]
        if mlp_bias:
            state[dst + "mlp.layers.0.bias"] = torch.cat([hf[mlp + "gate_proj.bias"], hf[mlp + "up_proj.bias"]])
            state[dst + "mlp.layers.2.bias"] = hf[mlp + "down_proj.bias"]
        state[dst + "norm_1.weight"] = hf[src + "input_layernorm.weight"]
        state[dst + "norm_2.weight"] = hf[src + "post_attention_layernorm.weight"]
    return cfg, state


def is_llama_shaped(cfg: GPTConfig) -> bool:
    """The toggles that pick the Llama format on save (RoPE + RMSNorm + SwiGLU); the rest is checked by
    `llama_inexpressible`."""
    return cfg.pos_emb == "rope" or cfg.norm_type == "rmsnorm" or cfg.activation == "swiglu"


def llama_inexpressible(cfg: GPTConfig) -> str:
    """Why the model cannot be written as a LlamaForCausalLM; '' if it can."""
    wanted = [("pos_emb", "rope"), ("norm_type", "rmsnorm"), ("activation", "swiglu"), ("norm", "pre"),
              ("final_norm", True), ("rope_fraction", 1.0), ("mlp_layers", 2), ("qk_norm", False),
              ("logit_softcap", None), ("v_head_dim", cfg.head_dim), ("qkv_bias", cfg.attn_bias)]
    for name, value in wanted:
        if getattr(cfg, name) != value:
            return f"model.{name}={getattr(cfg, name)!r}: Llama needs {value!r}"
    if cfg.rotary_dim != cfg.head_dim:  # an odd head_dim leaves its last dimension unrotated (rope.py)
        return (f"model.head_dim={cfg.head_dim}: Llama's RoPE turns every dimension of a head in pairs "
                "(an even head_dim)")
    if any(is_sparse(kind) for kind in cfg.attn_pattern):
        return f"model.attn_pattern={list(cfg.attn_pattern)!r}: Llama attends densely in every layer"
    if cfg.attn_scale is not None and abs(cfg.attn_scale - cfg.head_dim**-0.5) > 1e-12:
        return f"model.attn_scale={cfg.attn_scale!r}: Llama scales scores by 1/sqrt(head_dim)"
    if speedrun_structure(cfg):
        return f"{speedrun_structure(cfg)}: Llama has no such part"
    return ""


def inexpressible(reason: str) -> str:
    """A reason of `_expressible` or `llama_inexpressible` as a refusal says it: the model's setting, not an
    override to type; and the tools that read such a checkpoint as it is."""
    reason = re.sub(r"^model\.(\w+)=", r"its model.\1 is ", reason)
    return f"{reason}; sample.py and eval.py read the checkpoint as it is"


def to_llama(cfg: GPTConfig, ours: dict[str, torch.Tensor]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """config.json and weights of a LlamaForCausalLM; rows added by pad_vocab_to are dropped."""
    reason = llama_inexpressible(cfg)
    if reason:
        raise ConfigError(f"cannot save as a Hugging Face Llama model: {inexpressible(reason)}.")
    d, qk = cfg.vocab_size, cfg.n_head * cfg.head_dim
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": d, "hidden_size": cfg.n_embd,
        "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_head, "head_dim": cfg.head_dim, "max_position_embeddings": cfg.block_size,
        "rms_norm_eps": cfg.layer_norm_eps, "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "rope_theta": cfg.rope_theta, "hidden_act": "silu", "attention_bias": cfg.attn_bias,
        "mlp_bias": cfg.mlp_bias, "attention_dropout": cfg.dropout, "tie_word_embeddings": cfg.tie_weights,
    }
    hf = {"model.embed_tokens.weight": ours["tok_emb.weight"][:d], "model.norm.weight": ours["final_norm.weight"]}
    for i in range(cfg.n_layer):
        src, dst = f"blocks.{i}.", f"model.layers.{i}."
        for suffix in ("weight", "bias") if cfg.attn_bias else ("weight",):
            q, k, v = ours[f"{src}attn.qkv.{suffix}"].split([qk, qk, qk])
            for name, tensor in zip(PROJECTIONS, (q, k, v)):
                hf[f"{dst}self_attn.{name}.{suffix}"] = tensor
            hf[f"{dst}self_attn.o_proj.{suffix}"] = ours[f"{src}attn.out.{suffix}"]
        for suffix in ("weight", "bias") if cfg.mlp_bias else ("weight",):
            gate, up = ours[f"{src}mlp.layers.0.{suffix}"].chunk(2)
            hf[f"{dst}mlp.gate_proj.{suffix}"], hf[f"{dst}mlp.up_proj.{suffix}"] = gate, up
            hf[f"{dst}mlp.down_proj.{suffix}"] = ours[f"{src}mlp.layers.2.{suffix}"]
        hf[f"{dst}input_layernorm.weight"] = ours[f"{src}norm_1.weight"]
        hf[f"{dst}post_attention_layernorm.weight"] = ours[f"{src}norm_2.weight"]
    if not cfg.tie_weights:
        hf["lm_head.weight"] = ours["head.weight"][:d]
    return config, {k: v.contiguous() for k, v in hf.items()}
