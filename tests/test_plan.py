"""The compute planner against the GPT-3 paper's own figure, and what fits on one GPU."""

from __future__ import annotations

import pytest
from helpers import compose_config, run_script
from omegaconf import OmegaConf

from gptlab.config.schemas import Runtime
from gptlab.model import GPTConfig, count_parameters
from gptlab.preflight.planning import GPUS, activation_bytes, block_bytes_per_token, format_plan, make_plan

GPT3_175B = dict(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288, head_dim=128)


def test_gpt3_175b_on_300b_tokens_matches_the_paper_and_needs_sharding() -> None:
    plan = make_plan(GPTConfig(**GPT3_175B), tokens=300e9, gpus=1024)
    assert plan.total_flops == pytest.approx(3.14e23, rel=0.05)  # GPT-3 paper, Table D.1: 3.14e23
    assert plan.ddp["total_full"] > GPUS["H100"]["memory_bytes"]  # 16 B/param = 2.8 TB on each GPU
    assert plan.ddp["states"] == 16 * plan.parameters
    assert plan.fsdp["states"] == pytest.approx(16 * plan.parameters / 1024)
    single = make_plan(GPTConfig(**GPT3_175B), tokens=300e9, gpus=1)
    assert single.ddp["total_full"] > GPUS["H200"]["memory_bytes"]


def test_activation_terms_for_standard_shapes() -> None:
    """With D_K = D_V = D/H and d_ff = 4D, bf16 throughout and dropout: the plain block is Korthikanti et al.'s
    34·s·b·h (plus fp32 statistics); full keeps 2 bytes of the input; selective keeps the matmul outputs."""
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.1)
    h = 768
    stats = 4 * 12 + 16
    assert block_bytes_per_token(cfg, "none", "bf16-true")["kept"] == 34 * h + stats
    assert block_bytes_per_token(cfg, "full", "bf16-true")["kept"] == 2 * h
    assert block_bytes_per_token(cfg, "selective", "bf16-true")["kept"] == 2 * h + 2 * (3 * h + h + h + 4 * h + h) + 48
    mixed = block_bytes_per_token(cfg, "none", "bf16-mixed")["kept"]
    assert mixed == 34 * h + stats + 2 * 2 * h  # autocast keeps the residual stream, the norms' inputs, in fp32
    acts = {mode: activation_bytes(cfg, 2, mode) for mode in ("none", "selective", "full")}
    assert acts["full"] < acts["selective"] < acts["none"]


def test_plan_script_prints_the_table_and_says_what_does_not_fit() -> None:
    args = ["model=gpt3_175b", "trainer.devices=1", "trainer.num_nodes=1", "tokens=300e9"]
    proc = run_script("scripts/plan.py", args)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    preset = GPTConfig.from_dict(OmegaConf.to_container(compose_config(["model=gpt3_175b"]).model, resolve=True))
    assert f"gpt3_175b: {count_parameters(preset)['total']:,} parameters" in out
    assert "total training FLOPs: 3.2" in out or "total training FLOPs: 3.1" in out
    h100 = next(line for line in out.splitlines() if line.startswith("H100"))
    need = float(h100.split("DDP does not fit (")[1].split(" GB")[0].replace(",", ""))
    assert need > 2800  # 16 bytes x 175B parameters on one 80 GB GPU, and the activations of data.batch_size
    missing = run_script("scripts/plan.py", ["model=gpt2_small"])
    assert missing.returncode == 2 and "tokens is not set" in missing.stderr and "+tokens" not in missing.stderr


@pytest.mark.parametrize("overrides", [
    ["model=gpt2_small"],  # the default trainer: one process, fp32, data.batch_size=32
    ["model=gpt2_small", "trainer=ddp", "trainer.devices=8", "data.batch_size=4"],
    ["model=gpt2_small", "trainer=fsdp", "trainer.devices=8"],
    ["model=gpt2_small", "trainer=fsdp", "trainer.devices=8", "runtime.activation_checkpointing=true"],
    ["model=gpt2_small", "runtime.compile=false"],
])
def test_the_plan_counts_the_bytes_trains_memory_check_counts(overrides: list[str]) -> None:
    """The planner's column for the run's own strategy is train's check at the run's micro-batch and precision
    (the planner used to count micro-batch 1: "DDP fits (2.3 GB)" where train refused 42.9 GB)."""
    from gptlab.preflight.guards import estimate_memory
    from gptlab.preflight.planning import is_fsdp

    train = compose_config(overrides, "/tmp/plan-run")
    model_cfg = GPTConfig.for_tokenizer(OmegaConf.to_container(train.model, resolve=True), 256)
    runtime = Runtime(**{**OmegaConf.to_container(train.runtime), "compile": True})  # plan.yaml: a GPU run's
    if "runtime.compile=false" in overrides:
        runtime = Runtime(**OmegaConf.to_container(train.runtime))
    expected = estimate_memory(model_cfg, train.data.batch_size, train.trainer, "gpu", runtime).per_process
    plan_cfg = compose_config([*overrides, "tokens=1e9"], config_name="plan")
    trainer = {key: plan_cfg.trainer.get(key) for key in ("devices", "num_nodes", "precision")}
    trainer["strategy"] = OmegaConf.to_container(plan_cfg.trainer.strategy) \
        if hasattr(plan_cfg.trainer.strategy, "keys") else plan_cfg.trainer.strategy
    gpus = int(trainer["devices"]) * int(trainer["num_nodes"])
    plan = make_plan(model_cfg, 1e9, gpus, micro_batch=plan_cfg.data.batch_size, trainer_cfg=trainer,
                     runtime=Runtime(**OmegaConf.to_container(plan_cfg.runtime)))
    own = plan.fsdp if is_fsdp(trainer["strategy"]) else plan.ddp
    assert own["total"] == expected


def test_a_short_plan_says_hours_or_minutes_not_zero_days() -> None:
    from gptlab.preflight.planning import duration

    assert duration(2.5) == "2.5 days" and duration(0.5) == "12.0 hours" and duration(0.01) == "14.4 minutes"
    assert duration(1e-9) == "0.1 minutes"


def test_a_plan_that_does_not_fit_names_the_micro_batch_and_checkpointing_that_do() -> None:
    """gpt3_175b on 1024 GPUs at micro-batch 32 (issue 46: "FSDP does not fit" named nothing): the plan names the
    largest micro-batch dividing 32 and the checkpointing that fit each GPU, and planning that setting fits; DDP,
    whose states alone exceed a GPU, says so and names sharding."""
    trainer = {"devices": 1024, "num_nodes": 1, "precision": "bf16-mixed"}
    plan = make_plan(GPTConfig(**GPT3_175B), tokens=300e9, gpus=1024, micro_batch=32, trainer_cfg=trainer)
    text = format_plan(plan, "gpt3_175b", 0.4, "DDP")
    for kind, spec in GPUS.items():
        fit = plan.fits[(kind, "FSDP")]
        assert fit is not None and 32 % fit.micro_batch == 0 and fit.accumulate * fit.micro_batch == 32
        line = next(line for line in text.splitlines() if line.startswith(kind))
        assert "FSDP does not fit as configured" in line and f"data.batch_size={fit.micro_batch} " in line
        assert plan.fits[(kind, "DDP")] is None and "shard the states with trainer=fsdp" in line
        value = {"none": False, "selective": "selective", "full": True}[fit.mode]
        again = make_plan(GPTConfig(**GPT3_175B), tokens=300e9, gpus=1024, micro_batch=fit.micro_batch,
                          trainer_cfg={**trainer, "strategy": {"_target_": "fsdp"}},
                          runtime=Runtime(compile=True, activation_checkpointing=value))
        assert again.fsdp["total"] <= spec["memory_bytes"]
        assert f"FSDP fits ({again.fsdp['total'] / 1e9:,.1f} GB)" in format_plan(again, "gpt3_175b", 0.4, "FSDP")
        if fit.micro_batch < 32:  # the next larger divisor does not fit under any mode
            larger = fit.micro_batch * 2
            assert all(make_plan(GPTConfig(**GPT3_175B), 1.0, 1024, micro_batch=larger,
                                 trainer_cfg={**trainer, "strategy": {"_target_": "fsdp"}},
                                 runtime=Runtime(compile=True, activation_checkpointing=v)).fsdp["total"]
                       > spec["memory_bytes"] for v in (False, "selective", True))
