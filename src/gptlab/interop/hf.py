"""Hugging Face model directories in and out: GPT-2 (GPT2LMHeadModel), GPT-1 (OpenAIGPTLMHeadModel) and, for
the LLaMA-shaped configuration (RoPE, RMSNorm, SwiGLU), LlamaForCausalLM (llama_interop.py).

Reading needs no `transformers`: config.json and the weights (safetensors or pytorch_model.bin) are mapped
by a converter chosen by config.json's `model_type`. Both HF models store their projections as `Conv1D`
with the weight as (in, out), the transpose of nn.Linear's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Union

import torch
from safetensors.torch import load_file, save_file

from gptlab.atomic import atomic_write
from gptlab.checkpoint.errors import unreadable_reason
from gptlab.errors import ConfigError
from gptlab.interop.gpt_neo import convert_gpt_neo
from gptlab.interop.llama import convert_llama, inexpressible, is_llama_shaped, to_llama
from gptlab.interop.mup_export import as_standard
from gptlab.model.config import GPTConfig
from gptlab.model.gpt import GPT
from gptlab.model.sparse_attention import is_sparse
from gptlab.model.speedrun_checks import speedrun_structure

Converter = Callable[[dict[str, Any], dict[str, torch.Tensor]], tuple[GPTConfig, dict[str, torch.Tensor]]]

# GPT-2 picks its activation from transformers' ACT2FN; "gelu_new" and "gelu_pytorch_tanh" are both eq. 8.
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
                    "relu2": "relu2"}  # transformers' ACT2FN has relu(x)^2 under this name
# OpenAIGPT's own table maps "gelu" to the tanh approximation (the original GPT-1 code); it has no exact GELU.
OPENAI_GPT_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu"}


def _linear(conv1d_weight: torch.Tensor) -> torch.Tensor:
    return conv1d_weight.t().contiguous()


def _refuse(model_type: str, option: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{model_type} config option {option}={value!r} is not supported: {why}.")


def _block_weights(hf: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """The per-block tensors both GPT-2 and GPT-1 share (c_attn, c_proj, c_fc, c_proj and two LayerNorms)."""
    state: dict[str, torch.Tensor] = {}
    for i in range(n_layer):
        src, dst = f"h.{i}.", f"blocks.{i}."
        for hf_name, ours in [("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.out"),
                              ("mlp.c_fc", "mlp.layers.0"), ("mlp.c_proj", "mlp.layers.2")]:
            state[dst + ours + ".weight"] = _linear(hf[src + hf_name + ".weight"])
            state[dst + ours + ".bias"] = hf[src + hf_name + ".bias"]
        for hf_name, ours in [("ln_1", "norm_1"), ("ln_2", "norm_2")]:
            state[dst + ours + ".weight"] = hf[src + hf_name + ".weight"]
            state[dst + ours + ".bias"] = hf[src + hf_name + ".bias"]
    return state


def _head(hf: dict[str, torch.Tensor], tied: bool, embedding: torch.Tensor) -> torch.Tensor:
    return embedding if tied or "lm_head.weight" not in hf else hf["lm_head.weight"]


def _strip(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the base-model prefix, and the causal-mask buffers old GPT-2 checkpoints carry as `attn.bias`."""
    out = {}
    for key, value in hf.items():
        key = key.removeprefix("transformer.")
        if key.endswith("attn.masked_bias") or (key.endswith("attn.bias") and value.dim() == 4):
            continue
        out[key] = value
    return out


def _conv1d_config(config: dict[str, Any], **differences: Any) -> GPTConfig:
    """What GPT-2's and GPT-1's config.json say alike (same key names, learned positions, biases everywhere,
    tied head unless told otherwise); `differences` holds what sets them apart (norm placement, activation)."""
    return GPTConfig(
        vocab_size=config["vocab_size"], block_size=config["n_positions"], n_layer=config["n_layer"],
        n_head=config["n_head"], n_embd=config["n_embd"], pos_emb="learned",
        tie_weights=config.get("tie_word_embeddings", True), attn_bias=True, mlp_bias=True,
        dropout=config.get("resid_pdrop", 0.1), layer_norm_eps=config.get("layer_norm_epsilon", 1e-5), **differences,
    )


def convert_gpt2(config: dict[str, Any], hf: dict[str, torch.Tensor]) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """GPT2LMHeadModel: pre-LN, final ln_f, learned positions, biases everywhere."""
    hf = _strip(hf)
    for option, wanted in [("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                           ("add_cross_attention", False)]:
        if config.get(option, wanted) != wanted:
            raise _refuse("gpt2", option, config[option], f"gptlab's attention is plain eq. 5 ({option}={wanted})")
    activation = config.get("activation_function", "gelu_new")
    if activation not in GPT2_ACTIVATIONS:
        raise _refuse("gpt2", "activation_function", activation, f"use one of {sorted(GPT2_ACTIVATIONS)}")
    tied = config.get("tie_word_embeddings", True)
    cfg = _conv1d_config(config, d_ff=config.get("n_inner"), norm="pre", final_norm=True,
                         activation=GPT2_ACTIVATIONS[activation])
    state = {"tok_emb.weight": hf["wte.weight"], "pos_emb.weight": hf["wpe.weight"]}
    state |= _block_weights(hf, cfg.n_layer)
    state |= {"final_norm.weight": hf["ln_f.weight"], "final_norm.bias": hf["ln_f.bias"]}
    state["head.weight"] = _head(hf, tied, hf["wte.weight"])
    return cfg, state


def convert_openai_gpt(
    config: dict[str, Any], hf: dict[str, torch.Tensor]
) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """OpenAIGPTLMHeadModel (GPT-1): post-LN (ln_1 after attention, ln_2 after the MLP), no final norm."""
    hf = _strip(hf)
    activation = config.get("afn", "gelu")
    if activation not in OPENAI_GPT_ACTIVATIONS:
        raise _refuse("openai-gpt", "afn", activation, f"use one of {sorted(OPENAI_GPT_ACTIVATIONS)}")
    tied = config.get("tie_word_embeddings", True)
    cfg = _conv1d_config(config, norm="post", final_norm=False, activation=OPENAI_GPT_ACTIVATIONS[activation])
    state = {"tok_emb.weight": hf["tokens_embed.weight"], "pos_emb.weight": hf["positions_embed.weight"]}
    state |= _block_weights(hf, cfg.n_layer)
    state["head.weight"] = _head(hf, tied, hf["tokens_embed.weight"])
    return cfg, state


# config.json's model_type -> converter. A converter gets config.json as a dict and the weights exactly as
# stored (keys as in the file), and returns what GPT(cfg).load_state_dict(strict=True) accepts.
CONVERTERS: dict[str, Converter] = {
    "gpt2": convert_gpt2,
    "openai-gpt": convert_openai_gpt,
    "gpt_neo": convert_gpt_neo,  # GPT-3-style alternating global/local attention (issue 4's peer reference)
    "llama": convert_llama,  # RoPE + RMSNorm + SwiGLU, no biases, untied head
}


def _read_json(path: Path) -> Any:
    """A JSON file of a Hugging Face directory; a truncated or corrupt one is a ConfigError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{path} cannot be read as JSON ({err}): it is truncated or corrupt; export or download "
                          "the directory again.") from err


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, pytorch_model.bin, or their sharded *.index.json form."""
    for name, load in [("model.safetensors", load_file),
                       ("pytorch_model.bin", lambda p: torch.load(p, map_location="cpu", weights_only=True))]:
        index = directory / f"{name}.index.json"
        files = sorted(set(_read_json(index)["weight_map"].values())) if index.is_file() else [name]
        if all((directory / f).is_file() for f in files):
            state: dict[str, torch.Tensor] = {}
            for f in files:
                try:
                    state |= load(directory / f)
                except Exception as err:  # safetensors and torch raise several types for a file cut short
                    raise ConfigError(f"{directory / f} cannot be read as weights: "
                                      f"{weights_error(directory / f, err)}; export or download the directory "
                                      "again.") from err
            return state
    raise ConfigError(f"{directory} holds no model.safetensors or pytorch_model.bin (nor a sharded index of them); "
                      "export or download the directory again.")


def weights_error(path: Path, err: BaseException) -> str:
    """Why a weights file did not load: a pytorch_model.bin that pickles Python objects is refused as such (as a
    .ckpt is: gptlab.checkpoint.errors), anything else is cut short or corrupt."""
    if path.suffix == ".bin":
        return unreadable_reason(path, err).rstrip(".")
    reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return f"truncated or corrupt ({reason})"


def from_pretrained(path: Union[str, Path]) -> GPT:
    """Build a GPT from a local Hugging Face directory (`save_pretrained` output)."""
    directory = Path(path)
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{directory} is not a Hugging Face model directory: no config.json; give the directory "
                          "that scripts/export_hf.py or save_pretrained wrote, or export or download it again.")
    config = _read_json(config_file)
    if not isinstance(config, dict):
        raise ConfigError(f"{config_file} is not a JSON object of model settings; export the directory again.")
    model_type = config.get("model_type")
    if model_type not in CONVERTERS:
        raise ConfigError(f"{config_file}: model_type={model_type!r} is not one gptlab reads; give a directory of "
                          f"model_type {', '.join(sorted(CONVERTERS))}.")
    hf = _read_weights(directory)
    try:
        cfg, state = CONVERTERS[model_type](config, hf)
    except KeyError as err:
        raise ConfigError(f"{directory}: config.json or the weights lack {err} for a {model_type} model; export or "
                          "download the directory again.") from err
    model = GPT(cfg)
    model.load_state_checked(state, directory, "Its weights are not those its config.json describes; export or "
                             "download the directory again.")
    return model


def _expressible(cfg: GPTConfig) -> str:
    """Why a model cannot be written as GPT-2 (pre-LN) or GPT-1 (post-LN); '' if it can."""
    target = "GPT-2" if cfg.norm == "pre" else "GPT-1"
    if cfg.norm == "pre" and not cfg.final_norm:
        return "model.final_norm=false: GPT-2 always has a final LayerNorm (ln_f)"
    if cfg.norm == "post" and cfg.final_norm:
        return "model.final_norm=true: GPT-1 (post-LN) has no final LayerNorm"
    if cfg.pos_emb != "learned":
        return f"model.pos_emb={cfg.pos_emb!r}: {target} has learned positions only"
    if any(is_sparse(kind) for kind in cfg.attn_pattern):
        return f"model.attn_pattern={list(cfg.attn_pattern)!r}: {target} attends densely in every layer"
    for name, off in [("qk_norm", False), ("logit_softcap", None), ("activation", cfg.activation)]:
        if getattr(cfg, name) != off or (name == "activation" and cfg.gated):
            return f"model.{name}={getattr(cfg, name)!r}: {target} has no such option"
    if cfg.attn_scale is not None and abs(cfg.attn_scale - cfg.head_dim**-0.5) > 1e-12:
        return f"model.attn_scale={cfg.attn_scale!r}: {target} scales scores by 1/sqrt(head_dim)"
    if cfg.head_dim * cfg.n_head != cfg.n_embd:
        return f"model.head_dim={cfg.head_dim}: {target} needs n_head * head_dim = n_embd ({cfg.n_embd})"
    if cfg.v_head_dim != cfg.head_dim:
        return f"model.v_head_dim={cfg.v_head_dim}: {target} needs v_head_dim = head_dim"
    if cfg.mlp_layers != 2:
        return f"model.mlp_layers={cfg.mlp_layers}: {target}'s MLP has exactly two layers"
    if cfg.norm == "post" and cfg.activation in ("gelu", "relu2"):
        return f"model.activation={cfg.activation!r}: GPT-1 has the tanh GELU and ReLU only; use gelu_tanh or relu"
    if speedrun_structure(cfg):
        return f"{speedrun_structure(cfg)}: {target} has no such part"
    if cfg.norm == "post" and cfg.d_ff != 4 * cfg.n_embd:
        return f"model.d_ff={cfg.d_ff}: GPT-1's MLP is 4 * n_embd wide"
    return ""


def to_hf(model: GPT) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """config.json and Conv1D-layout weights. Pre-LN models become GPT-2, post-LN models GPT-1.

    Absent biases (attn_bias/mlp_bias=false) are written as zeros, which computes the same function;
    rows added by pad_vocab_to are dropped.
    """
    cfg = model.config
    reason = _expressible(cfg)
    if reason:
        raise ConfigError(f"cannot save as a Hugging Face model: {inexpressible(reason)}.")
    d, ours = cfg.vocab_size, {k: v.detach().cpu() for k, v in model.state_dict().items()}
    gpt2 = cfg.norm == "pre"
    act = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "relu2": "relu2"} if gpt2 else \
        {"gelu_tanh": "gelu", "relu": "relu"}
    common = {"vocab_size": d, "n_positions": cfg.block_size, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer,
              "n_head": cfg.n_head, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.dropout,
              "layer_norm_epsilon": cfg.layer_norm_eps, "tie_word_embeddings": cfg.tie_weights}
    if gpt2:
        config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_inner": cfg.d_ff,
                  "activation_function": act[cfg.activation], **common}
        emb, pos = "wte", "wpe"
    else:
        config = {"model_type": "openai-gpt", "architectures": ["OpenAIGPTLMHeadModel"],
                  "afn": act[cfg.activation], **common}
        emb, pos = "tokens_embed", "positions_embed"
    prefix = "transformer."  # both LM-head models keep the base model under this name
    hf = {f"{prefix}{emb}.weight": ours["tok_emb.weight"][:d], f"{prefix}{pos}.weight": ours["pos_emb.weight"]}
    for i in range(cfg.n_layer):
        src, dst = f"blocks.{i}.", f"{prefix}h.{i}."
        for hf_name, name in [("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.out"),
                              ("mlp.c_fc", "mlp.layers.0"), ("mlp.c_proj", "mlp.layers.2")]:
            weight = ours[src + name + ".weight"]
            hf[dst + hf_name + ".weight"] = _linear(weight)
            hf[dst + hf_name + ".bias"] = ours.get(src + name + ".bias", weight.new_zeros(weight.shape[0]))
        for hf_name, name in [("ln_1", "norm_1"), ("ln_2", "norm_2")]:
            hf[dst + hf_name + ".weight"] = ours[src + name + ".weight"]
            hf[dst + hf_name + ".bias"] = ours[src + name + ".bias"]
    if gpt2:
        hf[f"{prefix}ln_f.weight"], hf[f"{prefix}ln_f.bias"] = ours["final_norm.weight"], ours["final_norm.bias"]
    if not cfg.tie_weights:
        hf["lm_head.weight"] = ours["head.weight"][:d]
    return config, {k: v.contiguous() for k, v in hf.items()}


def settled_head(model: GPT) -> GPT:
    """A model trained with model.untie_at as what it is now: a tied or an untied GPT, without the schedule (the
    Hugging Face formats hold a head that is tied or not, not when it was untied)."""
    cfg = model.config
    if cfg.untie_at is None:
        return model
    plain = GPT(replace(cfg, untie_at=None, tie_weights=model.head_tied))
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != "head_untied"}, strict=True)
    return plain


def save_pretrained(model: GPT, path: Union[str, Path]) -> None:
    """Write a directory that transformers' AutoModelForCausalLM.from_pretrained loads (config + safetensors):
    Llama for a model with RoPE, RMSNorm or SwiGLU, otherwise GPT-2 (pre-LN) or GPT-1 (post-LN). A muP model is
    written as the standard model with the same logits (mup_export.py: its multipliers folded into the weights)."""
    model = settled_head(as_standard(model))
    if is_llama_shaped(model.config):
        config, state = to_llama(model.config, {k: v.detach().cpu() for k, v in model.state_dict().items()})
    else:
        config, state = to_hf(model)
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / "model.safetensors", lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    atomic_write(directory / "config.json", lambda tmp: Path(tmp).write_text(json.dumps(config, indent=2) + "\n"))
