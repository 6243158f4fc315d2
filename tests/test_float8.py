"""runtime.float8: refused with one clear message where it cannot run, and apply_float8 swaps exactly the Linear
layers float8 matmuls can take (both dims multiples of 16) of the kinds runtime.float8_layers names (the head only
when named)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from gptlab.errors import ConfigError
from gptlab.execution.float8 import apply_float8, check_float8, converts
from gptlab.model import GPT, GPTConfig

MODEL = dict(vocab_size=97, block_size=32, n_layer=2, n_head=4, n_embd=64)


@pytest.mark.parametrize("capability,torchao,expected", [
    (None, True, "needs a CUDA GPU with float8 tensor cores"),
    (None, False, "needs a CUDA GPU with float8 tensor cores"),  # installing torchao would not help on a CPU
    ((8, 0), True, "NVIDIA A100 has compute capability 8.0"),
    ((8, 6), False, "compute capability 8.6"),
    ((9, 0), False, "pip install torchao"),
])
def test_refusals_name_the_field_and_a_way_out(capability, torchao: bool, expected: str) -> None:
    with pytest.raises(ConfigError) as refusal:
        check_float8(capability, torchao, "NVIDIA A100")
    message = str(refusal.value)
    assert expected in message and message.startswith("runtime.float8=true")
    assert "runtime.float8=false" in message


@pytest.mark.parametrize("capability", [(8, 9), (9, 0), (10, 0)])
def test_float8_gpus_with_torchao_pass(capability) -> None:
    check_float8(capability, True)


def test_the_filter_keeps_the_head_and_odd_layers() -> None:
    assert converts(nn.Linear(64, 192), "blocks.0.attn.qkv")
    assert not converts(nn.Linear(64, 97), "head")
    assert not converts(nn.Linear(64, 128), "head")  # the readout stays bf16 even when it would fit
    assert not converts(nn.Linear(40, 64), "blocks.0.mlp.fc")  # 40 is not a multiple of 16
    assert not converts(nn.Linear(64, 120), "blocks.0.attn.qkv")
    assert not converts(nn.LayerNorm(64), "blocks.0.norm1")


def _linear_names(model: nn.Module) -> set[str]:
    return {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def test_apply_float8_hands_torchao_the_filter(monkeypatch) -> None:
    """Without torchao installed: a stand-in convert_to_float8_training records what the filter lets through."""
    swapped = []

    def convert(model, module_filter_fn):
        swapped.extend(name for name, m in model.named_modules() if module_filter_fn(m, name))

    fake = types.ModuleType("torchao.float8")
    fake.convert_to_float8_training = convert
    monkeypatch.setitem(sys.modules, "torchao", types.ModuleType("torchao"))
    monkeypatch.setitem(sys.modules, "torchao.float8", fake)
    model = GPT(GPTConfig(**MODEL))
    names = apply_float8(model)
    assert names == swapped
    assert set(names) == _linear_names(model) - {"head"} and len(names) == 2 * 4  # qkv, out, fc, proj per block


@pytest.mark.parametrize("layers,expected", [
    (["mlp", "head"], {"head"} | {f"blocks.{i}.mlp.layers.{j}" for i in range(2) for j in (0, 2)}),  # the speedrun's
    (["attention"], {f"blocks.{i}.attn.{m}" for i in range(2) for m in ("qkv", "out")}),
])
def test_float8_layers_chooses_the_kinds_to_swap(monkeypatch, layers: list[str], expected: set[str]) -> None:
    swapped: list[str] = []
    fake = types.ModuleType("torchao.float8")
    fake.convert_to_float8_training = lambda model, module_filter_fn: swapped.extend(
        name for name, m in model.named_modules() if module_filter_fn(m, name))
    monkeypatch.setitem(sys.modules, "torchao", types.ModuleType("torchao"))
    monkeypatch.setitem(sys.modules, "torchao.float8", fake)
    model = GPT(GPTConfig(**{**MODEL, "vocab_size": 96}))  # a head of 96 rows: a multiple of 16
    assert set(apply_float8(model, layers)) == set(swapped) == expected
    with pytest.raises(ConfigError, match=r"runtime.float8_layers=\['head'\] asks for head.*model.pad_vocab_to=64"):
        apply_float8(GPT(GPTConfig(**MODEL)), ["head"])  # 97 rows: no float8 matmul; refused, not skipped


def test_apply_float8_swaps_the_intended_layers_with_torchao() -> None:
    pytest.importorskip("torchao.float8", reason="torchao is an optional extra (pip install torchao)")
    from torchao.float8.float8_linear import Float8Linear

    model = GPT(GPTConfig(**MODEL, d_ff=200))  # the MLP's 200-wide layers cannot take float8 matmuls
    linears, keys = _linear_names(model), set(model.state_dict())
    names = apply_float8(model)
    float8 = {name for name, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert float8 == set(names) and float8
    assert all(name.endswith(("qkv", "out")) for name in float8)
    assert "head" not in float8 and isinstance(model.head, nn.Linear)
    assert model.head.weight is model.tok_emb.weight  # the tied head is untouched
    assert _linear_names(model) == linears  # Float8Linear subclasses nn.Linear: nothing else changed
    assert set(model.state_dict()) == keys  # checkpoints load either way
    assert all(getattr(model.get_submodule(f"blocks.{i}.attn.out"), "is_residual_projection", False)
               for i in range(MODEL["n_layer"]))  # the init's mark survives the swap
    assert all(m.weight.dtype == torch.float32 for m in model.modules() if isinstance(m, nn.Linear))
