"""The GPU fast path (issue 30): what a run on a CUDA GPU gets with no flag, what a CPU run keeps, the switches that
turn each part off, the peak table MFU reads, and the parts that run on any device (fused AdamW with clipping,
the vocabulary's padding left out of the reported parameters)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import compose_config

from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.execution.attention_backend import choose_attention_backend
from gptlab.execution.peak_flops import dense_peak, device_peak, lookup, mfu
from gptlab.model import GPT, GPTConfig


def resolved(overrides: list[str], tmp_path: Path) -> tuple[bool, object, str]:
    cfg = compose_config(overrides, tmp_path)
    return cfg.runtime.compile, cfg.model.pad_vocab_to, cfg.trainer.precision


@pytest.fixture
def cuda_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose torch sees a bf16-capable CUDA GPU (the resolvers ask torch, nothing else)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def test_cpu_runs_keep_the_plain_path(tmp_path: Path) -> None:
    assert resolved(["trainer.accelerator=cpu"], tmp_path) == (False, None, "32-true")
    assert resolved(["model=gpt2_small", "trainer=cpu"], tmp_path) == (False, None, "32-true")


@pytest.mark.parametrize("trainer", [["trainer=gpu"], ["trainer=ddp"], ["trainer=fsdp"], ["trainer.devices=8"],
                                     ["trainer=ddp", "trainer.devices=8"]])
def test_gpu_runs_get_the_fast_path_with_no_flag(trainer: list[str], cuda_machine: None, tmp_path: Path) -> None:
    compile_, pad, precision = resolved(["model=gpt2_small", *trainer], tmp_path)
    assert compile_ is True and pad == 64 and precision == "bf16-mixed"
    cfg = compose_config(["model=gpt2_small", *trainer], tmp_path)
    assert cfg.optimizer.fused is None  # AdamW's own default: fused wherever the device has it (bf16 keeps it)
    assert Runtime(**cfg.runtime).attention_backend == "auto"


def test_each_switch_turns_its_part_off(cuda_machine: None, tmp_path: Path) -> None:
    base = ["model=gpt2_small", "trainer=gpu"]
    assert resolved([*base, "runtime.compile=false"], tmp_path)[0] is False
    assert resolved([*base, "model.pad_vocab_to=null"], tmp_path)[1] is None
    assert resolved([*base, "trainer.precision=32-true"], tmp_path)[2] == "32-true"
    assert compose_config([*base, "runtime.attention_backend=flash"], tmp_path).runtime.attention_backend == "flash"
    assert compose_config([*base, "optimizer.fused=false"], tmp_path).optimizer.fused is False


def test_the_checkpoint_records_the_resolved_vocabulary(cuda_machine: None, tmp_path: Path) -> None:
    from gptlab.preflight.early_checks import build_model_config

    cfg = compose_config(["model=gpt2_small", "trainer=gpu"], tmp_path)
    model_cfg = build_model_config(cfg.model, 50257)
    assert model_cfg.pad_vocab_to == 64 and model_cfg.padded_vocab_size == 50304
    assert model_cfg.to_dict()["pad_vocab_to"] == 64  # what eval and sample rebuild from


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA GH200 480GB", "GH200 (its H100)"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200 (per GPU)"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA L4", "L4"), ("NVIDIA A10G", "A10"),
])
def test_peak_table_finds_each_gpu_by_its_driver_name(name: str, expected: str) -> None:
    assert lookup(name).name == expected


def test_peaks_are_dense_and_follow_the_precision() -> None:
    assert dense_peak("NVIDIA H200", "bf16-mixed") == pytest.approx(989.4e12)  # not the 1979 sparse figure
    assert dense_peak("NVIDIA H100 80GB HBM3", "32-true", "high") == pytest.approx(494.7e12)  # TF32
    assert dense_peak("NVIDIA H100 80GB HBM3", "32-true", "highest") == pytest.approx(66.9e12)  # plain fp32
    assert dense_peak("Tesla V100-SXM2-16GB", "bf16-mixed") is None
    assert lookup("NVIDIA GeForce RTX 3090") is None


def test_peak_override_and_mfu() -> None:
    assert device_peak(torch.device("cpu"), "32-true", 2e12) == (2e12, "callbacks.throughput.peak_flops")
    peak, why = device_peak(torch.device("cpu"), "32-true")
    assert peak is None and "cpu" in why
    # 508k tokens/s of GPT-2 small (855.4M FLOPs per token) on an H200: 43.9%, the issue's own figure
    assert mfu(508e3, 855_383_040, dense_peak("NVIDIA H200", "bf16-mixed")) == pytest.approx(0.439, abs=1e-3)


def test_attention_backend_choice_is_a_cuda_matter() -> None:
    assert choose_attention_backend("auto", 12, 1024, 64, torch.device("cpu")) is None


def test_fused_adamw_trains_under_bf16_mixed_with_its_gradients_clipped(tmp_path: Path) -> None:
    """gptlab clips the gradients itself (Lightning refuses to clip any fused optimizer under AMP): the norm the
    fused step sees is the clip value."""
    from gptlab.train.module import GPTLitModule
    from gptlab.train.optim import adamw

    model = GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=1, n_head=1, n_embd=8))
    module = GPTLitModule(model)
    optimizer = adamw(model.parameters(), lr=1e-3, fused=True)
    for p in model.parameters():
        p.grad = torch.full_like(p, 10.0)
    module.configure_gradient_clipping(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    assert norm == pytest.approx(1.0, rel=1e-5)
    assert optimizer.param_groups[0]["fused"] is True


def test_a_fused_step_under_loss_scaling_is_refused(tmp_path: Path) -> None:
    from gptlab.config.rules import check_rules

    cfg = compose_config(["optimizer.fused=true", "trainer.precision=16-mixed"], tmp_path)
    with pytest.raises(ConfigError, match="optimizer.fused=true cannot clip.*bf16-mixed"):
        check_rules(cfg)
    check_rules(compose_config(["optimizer.fused=true", "trainer.precision=bf16-mixed"], tmp_path))


def test_the_checkpointing_switch_is_one(tmp_path: Path) -> None:
    from gptlab.config.fsdp_keys import fsdp_key_problem

    assert "runtime.activation_checkpointing" in fsdp_key_problem(["activation_checkpointing"])
    assert Runtime(compile=False).checkpointing(sharded=True) == "selective"
    assert Runtime(compile=False).checkpointing(sharded=False) == "none"
    assert Runtime(compile=False, activation_checkpointing=False).checkpointing(sharded=True) == "none"
    assert Runtime(compile=False, activation_checkpointing=True).checkpointing(sharded=False) == "full"


def test_padding_rows_are_not_reported_as_parameters() -> None:
    from gptlab.model.accounting import padding_parameters

    cfg = GPTConfig(vocab_size=50257, pad_vocab_to=64, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    assert GPT(cfg).num_parameters() - padding_parameters(cfg) == 124_439_808  # GPT-2 small, as transformers counts
    assert padding_parameters(GPTConfig(**{**cfg.to_dict(), "tie_weights": False})) == 2 * 47 * 768


def test_debug_profile_writes_a_trace_into_the_run_dir(tmp_path: Path) -> None:
    """debug=profile: torch's profiler over a few steps after compiling, its trace in <run dir>/profile/."""
    import hydra
    from lightning.pytorch.profilers import PyTorchProfiler

    cfg = compose_config(["debug=profile"], tmp_path)
    profiler = hydra.utils.instantiate(cfg.trainer.profiler)
    assert isinstance(profiler, PyTorchProfiler) and Path(profiler.dirpath) == tmp_path / "profile"
    assert cfg.trainer.max_steps >= sum(cfg.trainer.profiler.schedule[k] for k in ("wait", "warmup", "active"))
