"""Hugging Face transformers is the numerical reference: same weights in, same logits and tokens out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, OpenAIGPTConfig, OpenAIGPTLMHeadModel

from gptlab.errors import ConfigError
from gptlab.interop import from_pretrained, save_pretrained
from gptlab.interop.hf import CONVERTERS
from gptlab.model import GPT, GPTConfig

TOL = 1e-5
GPT2_SHAPES = [
    dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4),
    dict(vocab_size=131, n_positions=48, n_embd=48, n_layer=3, n_head=3, n_inner=80, activation_function="relu"),
    dict(vocab_size=64, n_positions=64, n_embd=24, n_layer=1, n_head=2, activation_function="gelu",
         tie_word_embeddings=False, layer_norm_epsilon=1e-6),
]
GPT1_SHAPES = [
    dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4),
    dict(vocab_size=131, n_positions=48, n_embd=48, n_layer=3, n_head=6, afn="relu"),
    dict(vocab_size=64, n_positions=64, n_embd=24, n_layer=1, n_head=2, tie_word_embeddings=False),
]


def randomised(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random weights, biases and LayerNorm gains too (HF initialises biases to 0, which would hide a bias bug)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.1) + (p.dim() == 1) * p)
    return model.eval()


def hf_gpt2(seed: int, **shape) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(**shape, bos_token_id=None, eos_token_id=None, pad_token_id=0, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    return randomised(GPT2LMHeadModel(config), seed)


def hf_gpt1(seed: int, **shape) -> OpenAIGPTLMHeadModel:
    torch.manual_seed(seed)
    config = OpenAIGPTConfig(**shape, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return randomised(OpenAIGPTLMHeadModel(config), seed)


def as_legacy_bin(directory: Path, n_layer: int, n_positions: int) -> None:
    """Rewrite a safetensors dir the way the original GPT-2 release stores it: pytorch_model.bin, keys without
    the `transformer.` prefix, and the causal-mask buffers (`attn.bias`) saved as if they were weights."""
    state = {k.removeprefix("transformer."): v for k, v in load_file(directory / "model.safetensors").items()}
    for i in range(n_layer):
        state[f"h.{i}.attn.bias"] = torch.ones(1, 1, n_positions, n_positions).tril()
    torch.save(state, directory / "pytorch_model.bin")
    (directory / "model.safetensors").unlink()


def ids(vocab: int, batch: int = 2, length: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


CASES = [("gpt2", i, s) for i, s in enumerate(GPT2_SHAPES)] + [("gpt1", i, s) for i, s in enumerate(GPT1_SHAPES)]


@pytest.mark.parametrize("family,seed,shape", CASES, ids=lambda c: str(c) if isinstance(c, (str, int)) else "")
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
def test_from_pretrained_matches_hf_logits(tmp_path: Path, family: str, seed: int, shape: dict, safe: bool) -> None:
    hf = (hf_gpt2 if family == "gpt2" else hf_gpt1)(seed, **shape)
    hf.save_pretrained(tmp_path)
    if not safe:
        as_legacy_bin(tmp_path, shape["n_layer"], shape["n_positions"])
    model = from_pretrained(tmp_path).eval()
    assert model.config.norm == ("pre" if family == "gpt2" else "post")
    x = ids(shape["vocab_size"])
    with torch.no_grad():
        assert (model(x) - hf(x).logits).abs().max().item() <= TOL


@pytest.mark.parametrize("family,seed,shape", CASES, ids=lambda c: str(c) if isinstance(c, (str, int)) else "")
def test_greedy_generation_matches_hf_generate(tmp_path: Path, family: str, seed: int, shape: dict) -> None:
    hf = (hf_gpt2 if family == "gpt2" else hf_gpt1)(seed, **shape)
    hf.save_pretrained(tmp_path)
    model = from_pretrained(tmp_path)
    prompt = ids(shape["vocab_size"], batch=2, length=8, seed=seed)
    ours = model.generate(prompt, 32, temperature=0)
    theirs = hf.generate(prompt, max_new_tokens=32, do_sample=False, pad_token_id=0,
                         attention_mask=torch.ones_like(prompt))
    assert ours.shape == (2, 40) and torch.equal(ours, theirs)


def test_beam_search_matches_hf(tmp_path: Path) -> None:
    hf = hf_gpt2(7, **GPT2_SHAPES[0])
    hf.save_pretrained(tmp_path)
    model = from_pretrained(tmp_path)
    prompt = ids(97, batch=2, length=6, seed=3)
    ours = model.generate(prompt, 12, num_beams=4)
    theirs = hf.generate(prompt, max_new_tokens=12, num_beams=4, do_sample=False,
                         pad_token_id=0, attention_mask=torch.ones_like(prompt), early_stopping=False)
    assert torch.equal(ours, theirs)


OURS = [
    dict(vocab_size=97, block_size=32, n_layer=2, n_head=4, n_embd=32),
    dict(vocab_size=120, block_size=40, n_layer=3, n_head=2, n_embd=24, activation="relu", tie_weights=False,
         d_ff=56, attn_bias=False, pad_vocab_to=64),
    dict(vocab_size=64, block_size=32, n_layer=1, n_head=3, n_embd=48, activation="gelu", layer_norm_eps=1e-6),
    dict(vocab_size=97, block_size=32, n_layer=2, n_head=4, n_embd=32, norm="post"),
    dict(vocab_size=50, block_size=24, n_layer=2, n_head=2, n_embd=16, norm="post", tie_weights=False,
         mlp_bias=False),
]


@pytest.mark.parametrize("fields", OURS, ids=lambda f: f"{f.get('norm', 'pre')}-{f['n_embd']}")
def test_save_pretrained_loads_in_transformers(tmp_path: Path, fields: dict) -> None:
    torch.manual_seed(0)
    model = randomised(GPT(GPTConfig(**fields)), 1)
    save_pretrained(model, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    expected = GPT2LMHeadModel if model.config.norm == "pre" else OpenAIGPTLMHeadModel
    assert isinstance(hf, expected)
    x = ids(fields["vocab_size"], length=20)
    with torch.no_grad():
        ours = model(x)[..., : fields["vocab_size"]]
        assert (ours - hf(x).logits).abs().max().item() <= TOL
    back = from_pretrained(tmp_path).eval()  # and round trip
    with torch.no_grad():
        assert (back(x) - ours).abs().max().item() <= TOL


@pytest.mark.parametrize("change,option", [
    ({"final_norm": False}, "model.final_norm"),
    ({"pos_emb": "sinusoidal"}, "model.pos_emb"),
    ({"head_dim": 16}, "model.head_dim"),
    ({"v_head_dim": 4}, "model.v_head_dim"),
    ({"mlp_layers": 3}, "model.mlp_layers"),
])
def test_save_pretrained_refuses_what_gpt2_cannot_express(tmp_path: Path, change: dict, option: str) -> None:
    model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16, **change))
    with pytest.raises(ConfigError, match=option):
        save_pretrained(model, tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_mismatched_weights_list_keys_and_shapes(tmp_path: Path) -> None:
    hf = hf_gpt2(0, **GPT2_SHAPES[0])
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["n_embd"] = 40  # the config now disagrees with the weights
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as err:
        from_pretrained(tmp_path)
    message = str(err.value)
    assert "shape mismatches" in message and "tok_emb.weight: (97, 32)" in message and "(97, 40)" in message


def test_unknown_model_type_and_missing_dir(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ConfigError, match="model_type='mamba'.*gpt2"):
        from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="no config.json"):
        from_pretrained(tmp_path / "nowhere")
    assert set(CONVERTERS) >= {"gpt2", "openai-gpt"}
