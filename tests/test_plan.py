"""The compute planner against the GPT-3 paper's own figure, and what fits on one GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import CHECKOUT_ENV, HANG_GUARD_S, ROOT, compose_config
from omegaconf import OmegaConf

from gptlab.model import GPTConfig, count_parameters
from gptlab.runtime.planning import GPUS, activation_bytes, make_plan

GPT3_175B = dict(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288, head_dim=128)


def test_gpt3_175b_on_300b_tokens_matches_the_paper_and_needs_sharding() -> None:
    plan = make_plan(GPTConfig(**GPT3_175B), tokens=300e9, gpus=1024)
    assert plan.total_flops == pytest.approx(3.14e23, rel=0.05)  # GPT-3 paper, Table D.1: 3.14e23
    assert plan.ddp["total_checkpointed"] > GPUS["H100"]["memory_bytes"]  # 16 B/param = 2.8 TB on each GPU
    assert plan.ddp["weights"] + plan.ddp["gradients"] + plan.ddp["optimizer"] == 16 * plan.parameters
    assert plan.fsdp["optimizer"] == pytest.approx(12 * plan.parameters / 1024)
    single = make_plan(GPTConfig(**GPT3_175B), tokens=300e9, gpus=1)
    assert single.ddp["total_checkpointed"] > GPUS["H200"]["memory_bytes"]


def test_activation_count_is_korthikanti_for_standard_shapes() -> None:
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    acts = activation_bytes(cfg, micro_batch=2)
    s, b, h, L = 1024, 2, 768, 12
    logits = s * b * 50257 * 6
    assert acts["activations"] == 34 * s * b * h * L + logits  # 34·s·b·h per layer with fused attention
    assert acts["activations_checkpointed"] == 2 * s * b * h * L + 34 * s * b * h + logits
    assert acts["activations_checkpointed"] < acts["activations"]


def test_plan_script_prints_the_table_and_says_what_does_not_fit() -> None:
    args = ["model=gpt3_175b", "trainer.devices=1", "trainer.num_nodes=1", "+tokens=300e9"]
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "plan.py"), *args], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, cwd=ROOT, env=CHECKOUT_ENV)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    preset = GPTConfig.from_dict(OmegaConf.to_container(compose_config(["model=gpt3_175b"]).model))
    assert f"gpt3_175b: {count_parameters(preset)['total']:,} parameters" in out
    assert "total training FLOPs: 3.2" in out or "total training FLOPs: 3.1" in out
    h100 = next(line for line in out.splitlines() if line.startswith("H100"))
    assert "DDP does not fit (2,800.0 GB)" in h100  # 16 bytes x 175B parameters on one 80 GB GPU
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "plan.py"), "model=gpt2_small"],
                             capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT, env=CHECKOUT_ENV)
    assert missing.returncode == 2 and "+tokens=" in missing.stderr
