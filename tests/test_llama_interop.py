"""LLaMA-shaped gptlab models against transformers' LlamaForCausalLM: same weights in, same logits and tokens out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from gptlab.errors import ConfigError
from gptlab.interop import from_pretrained, save_pretrained
from gptlab.model import GPT, GPTConfig

TOL = 1e-5
SHAPES = [
    dict(vocab_size=97, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4),
    dict(vocab_size=61, hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=3,
         head_dim=8, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
         tie_word_embeddings=True, attention_bias=True, mlp_bias=True),
]


def hf_llama(seed: int, **shape) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(**shape, num_key_value_heads=shape["num_attention_heads"], max_position_embeddings=64,
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # random gains and biases too: HF's ones and zeros would hide a mapping bug
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.1) + (p.dim() == 1) * p)
    return model.eval()


def ids(vocab: int, batch: int = 2, length: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seed,shape", list(enumerate(SHAPES)))
def test_from_pretrained_matches_hf_logits_and_greedy_tokens(tmp_path: Path, seed: int, shape: dict) -> None:
    hf = hf_llama(seed, **shape)
    hf.save_pretrained(tmp_path)
    model = from_pretrained(tmp_path).eval()
    cfg = model.config
    assert (cfg.pos_emb, cfg.norm_type, cfg.activation) == ("rope", "rmsnorm", "swiglu")
    x = ids(shape["vocab_size"])
    with torch.no_grad():
        assert (model(x) - hf(x).logits).abs().max().item() <= TOL
    prompt = ids(shape["vocab_size"], length=8, seed=seed)
    ours = model.generate(prompt, 24, temperature=0)
    theirs = hf.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0,
                         attention_mask=torch.ones_like(prompt))
    assert ours.shape == (2, 32) and torch.equal(ours, theirs)


@pytest.mark.parametrize("fields", [
    dict(vocab_size=97, n_layer=2, n_head=4, n_embd=32),
    dict(vocab_size=70, n_layer=1, n_head=2, n_embd=32, head_dim=12, tie_weights=True, attn_bias=True,
         mlp_bias=True, rope_theta=1000.0, pad_vocab_to=64, d_ff=48),
])
def test_save_pretrained_writes_a_llama_dir_transformers_loads(tmp_path: Path, fields: dict) -> None:
    llama = dict(pos_emb="rope", norm_type="rmsnorm", activation="swiglu", attn_bias=False, mlp_bias=False,
                 tie_weights=False, block_size=48, layer_norm_eps=1e-6)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**llama, **fields}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_pretrained(model.eval(), tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "llama"
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(hf, LlamaForCausalLM)
    x = ids(fields["vocab_size"], length=30)
    with torch.no_grad():
        ours = model(x)[..., : fields["vocab_size"]]
        assert (ours - hf(x).logits).abs().max().item() <= TOL
        assert (from_pretrained(tmp_path).eval()(x) - ours).abs().max().item() <= TOL  # round trip


@pytest.mark.parametrize("change,option", [
    ({"qk_norm": True}, "model.qk_norm"),
    ({"rope_fraction": 0.5}, "model.rope_fraction"),
    ({"attn_pattern": ["dense", "local"]}, "model.attn_pattern"),
    ({"norm": "post", "final_norm": True}, "model.norm"),
])
def test_save_refuses_what_llama_cannot_express(tmp_path: Path, change: dict, option: str) -> None:
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16, pos_emb="rope", norm_type="rmsnorm",
                    activation="swiglu", attn_bias=False, mlp_bias=False, **change)
    with pytest.raises(ConfigError, match=option):
        save_pretrained(GPT(cfg), tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_gpt2_save_refuses_qk_norm_rather_than_dropping_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model.qk_norm"):
        save_pretrained(GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16, qk_norm=True)),
                        tmp_path)


def test_grouped_query_attention_is_refused_by_name(tmp_path: Path) -> None:
    hf_llama(0, **SHAPES[0]).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_key_value_heads"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        from_pretrained(tmp_path)
