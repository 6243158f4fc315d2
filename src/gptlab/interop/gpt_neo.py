"""EleutherAI's GPT-Neo (Hugging Face `GPTNeoForCausalLM`) as a gptlab GPT.

GPT-Neo is the open GPT-3 replica: pre-LN blocks that alternate global (dense) and local attention with a
256-token window, exactly [S3]'s pattern, so it is the peer reference for `attn_pattern`. Its quirks:
attention scores are NOT scaled by 1/sqrt(D_K) (attn_scale = 1.0), Q/K/V have no biases while the output
projection has one (qkv_bias = False, attn_bias = True), and the head is tied to the token embedding.
"""

from __future__ import annotations

from typing import Any

import torch

from gptlab.errors import ConfigError
from gptlab.model.config import GPTConfig

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
KINDS = {"global": "dense", "local": "local"}
# Buffers that old GPT-Neo checkpoints saved with the weights: the causal/local masks, rebuilt by gptlab.
MASK_BUFFERS = ("attn.attention.bias", "attn.attention.masked_bias")


def convert_gpt_neo(
    hf_config: dict[str, Any], hf_state: dict[str, torch.Tensor]
) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """A GPTConfig and a state dict that `GPT(cfg).load_state_dict(state, strict=True)` accepts.

    hf_config is GPT-Neo's config.json as a dict; hf_state its weights, from GPTNeoForCausalLM (keys under
    `transformer.`) or the bare GPTNeoModel.
    """
    cfg = _config(hf_config)
    src = {k.removeprefix("transformer."): t for k, t in hf_state.items() if not k.endswith(MASK_BUFFERS)}
    used: set[str] = set()

    def take(key: str) -> torch.Tensor:
        if key not in src:
            raise ConfigError(f"GPT-Neo weights lack {key!r}: not a whole GPTNeoForCausalLM; download the "
                              "directory again.")
        used.add(key)
        return src[key]

    state = {"tok_emb.weight": take("wte.weight"), "pos_emb.weight": take("wpe.weight")}
    for i in range(cfg.n_layer):
        h, b = f"h.{i}.", f"blocks.{i}."
        attn = h + "attn.attention."
        state[b + "attn.qkv.weight"] = torch.cat([take(attn + f"{p}_proj.weight") for p in "qkv"], dim=0)
        for ours, theirs in (
            ("norm_1", "ln_1"),
            ("attn.out", "attn.attention.out_proj"),
            ("norm_2", "ln_2"),
            ("mlp.layers.0", "mlp.c_fc"),  # f_1
            ("mlp.layers.2", "mlp.c_proj"),  # f_2 (layers.1 is the activation)
        ):
            for p in ("weight", "bias"):
                state[f"{b}{ours}.{p}"] = take(f"{h}{theirs}.{p}")
    state["final_norm.weight"], state["final_norm.bias"] = take("ln_f.weight"), take("ln_f.bias")
    # A tied checkpoint may omit lm_head.weight; GPT's state dict lists the shared tensor under both names.
    state["head.weight"] = take("lm_head.weight") if "lm_head.weight" in src else state["tok_emb.weight"]
    unused = sorted(set(src) - used)
    if unused:
        raise ConfigError(f"GPT-Neo weights have keys gptlab does not know: {unused[:5]}: not a GPTNeoForCausalLM's; "
                          "download the directory again.")
    return cfg, state


def _config(hf: dict[str, Any]) -> GPTConfig:
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise ConfigError(
            f"GPT-Neo activation_function={activation!r} has no gptlab equivalent (it reads {sorted(ACTIVATIONS)}): "
            "gptlab cannot run this model."
        )
    n_layer = hf.get("num_layers", hf.get("num_hidden_layers"))
    types = hf.get("attention_types", [[["global", "local"], 12]])  # [[kinds, repeats], ...]
    layers = [kind for kinds, repeats in types for _ in range(repeats) for kind in kinds]
    if len(layers) != n_layer or any(kind not in KINDS for kind in layers):
        raise ConfigError(
            f"GPT-Neo attention_types={types!r} do not give one 'global' or 'local' kind to each of {n_layer} layers: "
            "config.json is not a GPT-Neo model's; download the directory again."
        )
    hidden = hf["hidden_size"]
    return GPTConfig(
        vocab_size=hf["vocab_size"],
        block_size=hf["max_position_embeddings"],
        n_layer=n_layer,
        n_head=hf.get("num_heads", hf.get("num_attention_heads")),
        n_embd=hidden,
        d_ff=hf.get("intermediate_size") or 4 * hidden,
        norm="pre",
        final_norm=True,
        pos_emb="learned",
        tie_weights=hf.get("tie_word_embeddings", True),
        activation=ACTIVATIONS[activation],
        attn_bias=True,
        qkv_bias=False,
        mlp_bias=True,
        # One dropout in gptlab; GPT-Neo's three are 0 in every released checkpoint.
        dropout=max(float(hf.get(k, 0.0)) for k in ("embed_dropout", "attention_dropout", "resid_dropout")),
        layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        attn_pattern=_shortest_cycle([KINDS[kind] for kind in layers]),
        attn_window=hf.get("window_size", 256),
        attn_scale=1.0,
    )


def _shortest_cycle(kinds: list[str]) -> list[str]:
    """The shortest pattern whose cycle gives `kinds` layer by layer: [dense, local] rather than 24 entries."""
    for period in range(1, len(kinds)):
        if all(kind == kinds[i % period] for i, kind in enumerate(kinds)):
            return kinds[:period]
    return kinds
