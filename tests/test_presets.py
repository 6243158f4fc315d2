"""Every preset in conf/model/ is exactly a GPTConfig, and the parameter accounting is exact ([S3])."""

from __future__ import annotations

import random
from dataclasses import fields, replace
from pathlib import Path

import pytest
from helpers import ROOT, compose_config, run_script
from omegaconf import OmegaConf

from gptlab.model import GPT, GPTConfig, count_parameters, training_flops_per_token

PRESETS = sorted((ROOT / "conf" / "model").glob("*.yaml"))


def resolved(name: str) -> dict:
    """The preset as Hydra composes it: its own fields over those of the presets it inherits."""
    return OmegaConf.to_container(compose_config([f"model={name}"]).model, resolve=True)


def preset(name: str, **overrides) -> GPTConfig:
    return GPTConfig(**{**resolved(name), **overrides})


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_resolves_to_exactly_gptconfig_fields_and_builds(path: Path) -> None:
    values = resolved(path.stem)
    assert set(values) == {f.name for f in fields(GPTConfig)}
    GPTConfig.from_dict({**values, "vocab_size": values["vocab_size"] or 257})
    lines = path.read_text().splitlines()
    own = [line for line in lines if line and not line.startswith(("#", "defaults:", "  - "))]
    for line in own:  # every field a preset states says where it comes from
        assert "#" in line, f"{path.name}: uncommented field {line!r}"
    if path.stem != "base":  # each preset states only what differs from the preset it inherits
        assert "defaults:" in lines and len(own) <= 12, f"{path.name} restates fields it could inherit"


# Shapes of the papers' tables, checked on the resolved presets (inheritance must not lose or change one).
SHAPES = {  # n_layer, n_head, n_embd, head_dim (null = n_embd / n_head), block_size, attention pattern
    "gpt1": (12, 12, 768, None, 512, ["dense"]),
    "gpt2_small": (12, 12, 768, None, 1024, ["dense"]),
    "gpt2_medium": (24, 16, 1024, None, 1024, ["dense"]),
    "gpt2_large": (36, 20, 1280, None, 1024, ["dense"]),
    "gpt2_xl": (48, 25, 1600, None, 1024, ["dense"]),
    "gpt3_small": (12, 12, 768, 64, 2048, ["dense", "local"]),
    "gpt3_medium": (24, 16, 1024, 64, 2048, ["dense", "local"]),
    "gpt3_large": (24, 16, 1536, 96, 2048, ["dense", "local"]),
    "gpt3_xl": (24, 24, 2048, 128, 2048, ["dense", "local"]),
    "gpt3_2.7b": (32, 32, 2560, 80, 2048, ["dense", "local"]),
    "gpt3_6.7b": (32, 32, 4096, 128, 2048, ["dense", "local"]),
    "gpt3_13b": (40, 40, 5140, 128, 2048, ["dense", "local"]),
    "gpt3_175b": (96, 96, 12288, 128, 2048, ["dense", "local"]),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_preset_shapes(name: str) -> None:
    v = resolved(name)
    assert (v["n_layer"], v["n_head"], v["n_embd"], v["head_dim"], v["block_size"], v["attn_pattern"]) == SHAPES[name]


def test_all_presets_present() -> None:
    expected = {"nano", "gpt1", "gpt2_small", "gpt2_medium", "gpt2_large", "gpt2_xl", "gpt3_small", "gpt3_medium",
                "gpt3_large", "gpt3_xl", "gpt3_2.7b", "gpt3_6.7b", "gpt3_13b", "gpt3_175b"}
    assert expected <= {p.stem for p in PRESETS}


# Seed 003's table: attention without biases, a final LayerNorm in every row, tied head.
SEED_TABLE = {
    "gpt1": 116_132_352,
    "gpt2_small": 124_402_944,
    "gpt3_small": 125_189_376,
    "gpt3_medium": 355_773_440,
    "gpt3_large": 760_152_576,
    "gpt3_xl": 1_516_853_248,
    "gpt3_2.7b": 2_651_225_600,
    "gpt3_6.7b": 6_657_880_064,
    "gpt3_13b": 12_935_668_380,
    "gpt3_175b": 174_599_540_736,
}


@pytest.mark.parametrize("name", list(SEED_TABLE))
def test_seed_table_rows_exact(name: str) -> None:
    overrides = {"attn_bias": False}
    if name == "gpt1":
        # The seed counts GPT-1 with d = 40000 and a final LayerNorm (2·768 parameters) that GPT-1 lacks.
        no_final = count_parameters(preset(name, vocab_size=40000, **overrides))["total"]
        assert no_final == SEED_TABLE[name] - 2 * 768
        overrides |= {"vocab_size": 40000, "final_norm": True}
    assert count_parameters(preset(name, **overrides))["total"] == SEED_TABLE[name]


def test_seed_table_components_gpt3_175b() -> None:
    counts = count_parameters(preset("gpt3_175b", attn_bias=False))
    assert counts["embedding"] == 617_558_016 and counts["position"] == 25_165_824
    assert counts["attention"] == 57_982_058_496 and counts["mlp"] == 115_970_015_232
    assert counts["norm"] == 4_718_592 + 2 * 12288 and counts["head"] == 0


def test_hf_counts_with_biases() -> None:
    assert count_parameters(preset("gpt2_small"))["total"] == 124_439_808
    assert count_parameters(preset("gpt1"))["total"] == 116_534_784  # OpenAIGPTLMHeadModel("openai-gpt")


SMALL = dict(vocab_size=101, block_size=16, n_layer=2, n_head=2, n_embd=24)
VARIANTS = [
    {},
    {"attn_bias": False, "mlp_bias": False},
    {"tie_weights": False, "pos_emb": "sinusoidal"},
    {"norm": "post", "pos_emb": "none"},
    {"head_dim": 16, "v_head_dim": 8, "n_head": 3},  # H·D_K ≠ D, D_V ≠ D_K
    {"mlp_layers": 3, "d_ff": 40, "final_norm": False},
    {"pad_vocab_to": 64},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_count_equals_built_model(variant: dict) -> None:
    cfg = GPTConfig(**{**SMALL, **variant})
    model = GPT(cfg)
    counts = count_parameters(cfg)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["embedding"] == model.tok_emb.weight.numel()
    assert counts["attention"] == sum(p.numel() for b in model.blocks for p in b.attn.parameters())
    assert counts["mlp"] == sum(p.numel() for b in model.blocks for p in b.mlp.parameters())


def random_config(rng: random.Random) -> GPTConfig:
    """Any combination of the fields that change parameter counts: every bool independently, D_K and D_V
    decoupled from D, every attention kind, every position kind, deeper MLPs, a padded vocabulary, and the
    post-GPT-3 toggles (RoPE/ALiBi, RMSNorm, gated MLPs, QK-norm, z-loss, soft-capped logits)."""
    n_head = rng.randint(1, 4)
    values = dict(
        vocab_size=rng.randint(5, 300), block_size=rng.randint(4, 40), n_layer=rng.randint(1, 3), n_head=n_head,
        n_embd=n_head * rng.randint(1, 6), head_dim=rng.choice([None, rng.randint(1, 9)]),
        v_head_dim=rng.choice([None, rng.randint(1, 9)]), d_ff=rng.choice([None, rng.randint(1, 50)]),
        mlp_layers=rng.randint(1, 4), norm=rng.choice(["pre", "post"]), final_norm=rng.choice([None, True, False]),
        tie_weights=rng.random() < 0.5, attn_bias=rng.random() < 0.5,
        qkv_bias=rng.choice([None, True, False]), mlp_bias=rng.random() < 0.5,
        attn_pattern=rng.sample(["dense", "local", "strided"], rng.randint(1, 3)), attn_window=rng.randint(1, 8),
        pad_vocab_to=rng.choice([None, 8, 64]),
        pos_emb=rng.choice(["learned", "sinusoidal", "none", "rope", "alibi"]),
        activation=rng.choice(["gelu_tanh", "gelu", "relu", "swiglu", "geglu"]),
        norm_type=rng.choice(["layernorm", "rmsnorm"]), qk_norm=rng.random() < 0.5,
        rope_fraction=rng.choice([1.0, 0.5]),
        rope_theta=rng.choice([10000.0, 500000.0]), z_loss=rng.choice([0.0, 1e-4]),
        logit_softcap=rng.choice([None, 30.0]),
    )
    if values["pos_emb"] == "rope":  # RoPE rotates pairs: a head needs >= 2 rotated dims
        values["head_dim"] = 4 * rng.randint(1, 3)
    return GPTConfig(**values)


@pytest.mark.parametrize("seed", range(200))
def test_count_equals_built_model_for_random_configs(seed: int) -> None:
    cfg = random_config(random.Random(seed))
    model = GPT(cfg)
    counts = count_parameters(cfg)
    assert counts["total"] == sum(p.numel() for p in model.parameters()), cfg
    assert counts["attention"] == sum(p.numel() for b in model.blocks for p in b.attn.parameters()), cfg
    assert counts["mlp"] == sum(p.numel() for b in model.blocks for p in b.mlp.parameters()), cfg
    # FLOPs: 6 x (every matmul weight the blocks, the final norm and the head hold), counted on the built model
    matmul = sum(p.numel() for p in [*model.blocks.parameters(), *model.final_norm.parameters()])
    assert training_flops_per_token(cfg)["weights"] == 6 * (matmul + model.head.weight.numel()), cfg


def test_qkv_bias_apart_from_attn_bias_is_counted() -> None:
    cfg = GPTConfig(**{**SMALL, "attn_bias": False, "qkv_bias": True})
    assert count_parameters(cfg)["total"] == sum(p.numel() for p in GPT(cfg).parameters())


def test_pad_vocab_to_rounds_up() -> None:
    cfg = preset("gpt2_small", pad_vocab_to=64)
    assert cfg.padded_vocab_size == 50304 and cfg.vocab_size == 50257
    assert count_parameters(cfg)["embedding"] == 50304 * 768


def test_flops_are_6n_plus_attention() -> None:
    cfg = preset("gpt2_small")
    counts, flops = count_parameters(cfg), training_flops_per_token(cfg)
    n = counts["total"] - counts["position"]  # tied: the embedding is the head's matmul
    assert flops["weights"] == 6 * n
    assert flops["attention"] == 12 * 12 * 12 * 64 * 1024  # PaLM: 12·L·H·Q·T
    untied = replace(cfg, tie_weights=False)
    assert training_flops_per_token(untied)["weights"] == 6 * n  # a lookup table costs no matmul


def test_count_params_script_175b_and_unknown_preset() -> None:
    run = run_script("scripts/count_params.py", ["model=gpt3_175b", "model.attn_bias=false"])
    assert run.returncode == 0, run.stderr
    assert "174,599,540,736" in run.stdout and "57,982,058,496" in run.stdout and "33.2%" in run.stdout
    assert "6N" in run.stdout
    bad = run_script("scripts/count_params.py", ["model=gpt4"])
    assert bad.returncode != 0 and "gpt3_175b" in bad.stderr and "gpt2_small" in bad.stderr
