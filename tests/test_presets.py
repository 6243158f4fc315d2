"""Every preset in conf/model/ is exactly a GPTConfig, and the parameter accounting is exact (seed 003)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml
from conftest import CHECKOUT_ENV, ROOT

from gptlab.model import GPT, GPTConfig, count_parameters, training_flops_per_token

PRESETS = sorted((ROOT / "conf" / "model").glob("*.yaml"))


def preset(name: str, **overrides) -> GPTConfig:
    values = yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())
    return GPTConfig(**{**values, **overrides})


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_holds_exactly_gptconfig_fields_and_builds(path: Path) -> None:
    values = yaml.safe_load(path.read_text())
    assert set(values) == {f.name for f in fields(GPTConfig)}
    GPTConfig.from_dict({**values, "vocab_size": values["vocab_size"] or 257})
    for line in path.read_text().splitlines():  # every field says where it comes from
        if line and not line.startswith("#"):
            assert "#" in line, f"{path.name}: uncommented field {line!r}"


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
    run = subprocess.run(
        [sys.executable, "scripts/count_params.py", "model=gpt3_175b", "model.attn_bias=false"],
        cwd=ROOT, env=CHECKOUT_ENV, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "174,599,540,736" in run.stdout and "57,982,058,496" in run.stdout and "33.2%" in run.stdout
    assert "6N" in run.stdout
    bad = subprocess.run([sys.executable, "scripts/count_params.py", "model=gpt4"], cwd=ROOT, env=CHECKOUT_ENV,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "gpt3_175b" in bad.stderr and "gpt2_small" in bad.stderr
