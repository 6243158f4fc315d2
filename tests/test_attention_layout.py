"""attn_* config fields: validation, per-layer kinds in GPT, kernels agreeing end to end, the ablation sweep."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import ROOT, run_train
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig

SMALL = dict(vocab_size=50, block_size=48, n_layer=3, n_head=2, n_embd=16)


@pytest.mark.parametrize(
    "overrides,field,hint",
    [
        ({"attn_window": 0}, "model.attn_window=0", "positive integer"),
        ({"attn_window": 2.5}, "model.attn_window=2.5", "positive integer"),
        ({"attn_pattern": ["dense", "banded"]}, "model.attn_pattern", "dense, local, strided"),
        ({"attn_pattern": []}, "model.attn_pattern is empty", "[dense]"),
        ({"attn_pattern": "local"}, "model.attn_pattern='local'", "model.attn_pattern=[dense,local]"),
        ({"attn_impl": "triton"}, "model.attn_impl='triton'", "'chunked'"),
        ({"attn_scale": 0.0}, "model.attn_scale=0.0", "null for 1/sqrt(D_K)"),
    ],
)
def test_bad_attention_fields_name_the_field(overrides: dict, field: str, hint: str) -> None:
    with pytest.raises(ConfigError) as err:
        GPTConfig(**SMALL, **overrides)
    assert field in str(err.value) and hint in str(err.value)


def test_pattern_cycles_over_layers() -> None:
    model = GPT(GPTConfig(**{**SMALL, "n_layer": 5}, attn_pattern=["dense", "local"], attn_window=4))
    assert [b.attn.kind for b in model.blocks] == ["dense", "local", "dense", "local", "dense"]


def test_qkv_bias_defaults_to_attn_bias_and_can_be_split() -> None:
    assert GPTConfig(**SMALL, attn_bias=False).qkv_bias is False
    attn = GPT(GPTConfig(**SMALL, qkv_bias=False)).blocks[0].attn
    assert attn.qkv.bias is None and attn.out.bias is not None


def logits_and_grads(cfg: GPTConfig, idx: torch.Tensor) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = GPT(cfg)
    logits = model(idx)
    logits.square().mean().backward()
    return [logits.detach()] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("pattern", [["dense", "local"], ["local", "strided"]])
def test_gpt_with_chunked_kernels_equals_sdpa_reference(pattern: list[str]) -> None:
    idx = torch.randint(0, 50, (2, 45), generator=torch.Generator().manual_seed(0))
    kwargs = dict(**SMALL, head_dim=8, v_head_dim=12, attn_pattern=pattern, attn_window=7)
    ref = logits_and_grads(GPTConfig(**kwargs, attn_impl="sdpa"), idx)
    got = logits_and_grads(GPTConfig(**kwargs, attn_impl="chunked"), idx)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


def test_attn_scale_null_is_one_over_sqrt_head_dim() -> None:
    idx = torch.randint(0, 50, (1, 20), generator=torch.Generator().manual_seed(0))
    local = dict(**SMALL, attn_pattern=["local"], attn_window=5)
    default = logits_and_grads(GPTConfig(**local), idx)[0]
    explicit = logits_and_grads(GPTConfig(**local, attn_scale=1 / math.sqrt(8)), idx)[0]
    unscaled = logits_and_grads(GPTConfig(**local, attn_scale=1.0), idx)[0]
    torch.testing.assert_close(explicit, default)
    assert (unscaled - default).abs().max() > 1e-4


def test_ablation_sweep_composes_three_layouts() -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=ablate_attention"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    (override,) = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()])
    assert override.key_or_group == "model.attn_pattern"
    layouts = list(override.sweep_iterator())
    assert layouts == [["dense"], ["dense", "local"], ["local"]]
    assert cfg.model.attn_window < cfg.model.block_size  # otherwise local would equal dense
    for layout in layouts:
        model_cfg = GPTConfig.from_dict({**cfg.model, "attn_pattern": layout, "vocab_size": 257})
        assert GPT(model_cfg).blocks[1].attn.kind == layout[1 % len(layout)]


def test_flex_on_cpu_training_exits_with_the_field_named(tmp_path: Path) -> None:
    """The check sits where the device is known: the first training forward on CPU refuses FlexAttention."""
    proc = run_train(["trainer=cpu", "model.attn_pattern=[dense,local]", "model.attn_window=64", "model.attn_impl=flex",
                      "trainer.max_steps=1", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "model.attn_impl=flex cannot train on CPU" in proc.stderr and "auto or chunked" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ablation_sweep_runs_one_job_per_layout(tmp_path: Path) -> None:
    """The real multirun: three jobs, each training a step with its own layout (chunked kernels included).
    (Not debug=fast_dev_run: that writes no run dir, so nothing would show which layout each job had.)"""
    proc = run_train(["-m", "experiment=ablate_attention", "trainer.max_steps=1", "trainer.limit_val_batches=1",
                      "callbacks.text_samples.max_new_tokens=2", "data.batch_size=4", f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    patterns = [(tmp_path / str(job) / ".hydra" / "overrides.yaml").read_text() for job in range(3)]
    assert ["[dense]" in patterns[0], "[dense,local]" in patterns[1], "[local]" in patterns[2]] == [True] * 3
    assert not (tmp_path / "3").exists()
