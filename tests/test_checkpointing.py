"""runtime.activation_checkpointing (full, selective) and runtime.compile_scope=blocks, applied by
execution/parallelize.py: the gradients of the plain model exactly, the recomputation really done (and, under selective,
no matmul done twice: what HFU counts), the state_dict keys unchanged; per-block compile computes the eager loss and
gradients with one compiled code shared by the identical blocks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from helpers import compose_config
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from gptlab.config.rules import check_rules
from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.execution.checkpointing import checkpoint_blocks, hardware_flops_per_token, recomputed_flops_per_token
from gptlab.execution.parallelize import parallelize
from gptlab.model import GPT, GPTConfig, training_flops_per_token
from gptlab.model.loss import model_loss
from gptlab.preflight.early_checks import check_config

CPU = torch.device("cpu")
CFG = dict(vocab_size=61, block_size=16, n_layer=3, n_head=2, n_embd=32, pad_vocab_to=64)


class OpCounts(TorchDispatchMode):
    """How often each aten op runs (forward and backward, recomputation included)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def step(mode: str, dropout: float = 0.1) -> tuple[GPT, Counter[str]]:
    """One forward and backward of the same model and batch under checkpointing `mode`, the ops counted."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG, dropout=dropout))
    keys = list(model.state_dict())
    checkpoint_blocks(model, mode)
    assert list(model.state_dict()) == keys  # wrapped in place: no `_checkpoint_wrapped_module.` in the keys
    x = torch.randint(0, 61, (4, 16), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)  # dropout's masks: the same draws in every mode, and again in the recomputation
    with OpCounts() as ops:
        model_loss(model, x, x).objective.backward()
    return model, ops.calls


def test_checkpointing_gives_the_plain_gradients_exactly_and_recomputes_what_it_says() -> None:
    plain, plain_ops = step("none")
    layers = CFG["n_layer"]
    for mode in ("full", "selective"):
        model, ops = step(mode)
        for (name, a), b in zip(plain.named_parameters(), model.parameters()):
            assert torch.equal(a.grad, b.grad), (mode, name)  # bit for bit, dropout included
        # The elementwise ops run again in backward: each block's GELU and its two norms.
        assert ops["gelu"] == plain_ops["gelu"] + layers, mode
        assert ops["native_layer_norm"] == plain_ops["native_layer_norm"] + 2 * layers, mode
    full, selective = step("full")[1], step("selective")[1]
    matmuls = ("mm", "addmm")
    # full runs every block matmul again (4 per block: QKV, out projection, two MLP layers); selective none of them.
    assert sum(full[op] for op in matmuls) == sum(plain_ops[op] for op in matmuls) + 4 * layers
    assert sum(selective[op] for op in matmuls) == sum(plain_ops[op] for op in matmuls)


def test_hardware_flops_count_the_matmuls_the_recomputation_runs() -> None:
    """HFU's extra FLOPs (full: one forward of the blocks; selective: none) are what torch's FLOP counter sees run
    (without biases and norm gains, which 6N counts and a FLOP counter does not)."""
    cfg = dict(CFG, attn_bias=False, mlp_bias=False, dropout=0.0)
    x = torch.randint(0, 61, (4, 16))
    flops = {}
    for mode in ("none", "full", "selective"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**cfg))
        checkpoint_blocks(model, mode)
        with FlopCounterMode(display=False) as counter:
            model_loss(model, x, x).objective.backward()
        flops[mode] = counter.get_total_flops()
    gpt = GPTConfig(**cfg)
    tokens = x.numel()
    assert flops["selective"] == flops["none"]
    attention_forward = training_flops_per_token(gpt)["attention"] // 3  # CPU's SDPA kernel is not in the counter
    recomputed = recomputed_flops_per_token(gpt, "full")
    assert flops["full"] - flops["none"] == pytest.approx((recomputed - attention_forward) * tokens, rel=0.02)
    assert hardware_flops_per_token(gpt, "selective") == training_flops_per_token(gpt)["total"]
    assert hardware_flops_per_token(gpt, "full") == training_flops_per_token(gpt)["total"] + \
        recomputed_flops_per_token(gpt, "full")


def test_the_null_default_is_selective_under_fsdp_only() -> None:
    assert Runtime(compile=False).checkpointing(sharded=True) == "selective"
    assert Runtime(compile=False).checkpointing(sharded=False) == "none"
    assert Runtime(compile=False, activation_checkpointing="selective").checkpointing(sharded=False) == "selective"
    assert Runtime(compile=True).compiled_scope(sharded=True) == "blocks"
    assert Runtime(compile=True).compiled_scope(sharded=False) == "model"
    assert Runtime(compile=False, compile_scope="blocks").compiled_scope(sharded=False) is None


def test_a_whole_model_graph_is_refused_under_fsdp(tmp_path) -> None:
    with pytest.raises(ConfigError, match="runtime.compile_scope=model cannot run under trainer=fsdp.*"
                                          "runtime.compile_scope=blocks"):
        check_rules(compose_config(["trainer=fsdp", "runtime.compile_scope=model"], tmp_path))
    check_rules(compose_config(["trainer=fsdp", "runtime.compile_scope=blocks"], tmp_path))
    with pytest.raises(ConfigError, match="runtime.activation_checkpointing='sometimes' is invalid: use true, false, "
                                          "selective or null"):
        check_config(compose_config(["runtime.activation_checkpointing=sometimes"], tmp_path))


def test_per_block_compile_matches_eager_with_one_code_for_all_blocks() -> None:
    """compile_scope=blocks with selective checkpointing (FSDP's defaults), on one device: inductor's CPU kernels
    give the eager loss and gradients to float tolerance; the three identical blocks share one compiled graph, so
    the whole model compiles two graphs (a block and the loss), not one per layer."""
    torch.manual_seed(0)
    eager = GPT(GPTConfig(**CFG))
    compiled = GPT(GPTConfig(**CFG))
    compiled.load_state_dict(eager.state_dict())
    keys = list(compiled.state_dict())
    torch._dynamo.reset()
    counters.clear()
    loss_fn = parallelize(compiled, Runtime(compile=True, compile_scope="blocks", activation_checkpointing="selective"),
                          CPU)
    assert list(compiled.state_dict()) == keys  # no `_orig_mod.`
    for seed in range(2):  # a second step reuses the graphs
        x = torch.randint(0, 61, (4, 16), generator=torch.Generator().manual_seed(seed))
        want, got = model_loss(eager, x, x, z_loss=1e-3), loss_fn(x, x, None, 0.0, 1e-3)
        torch.testing.assert_close(got.objective, want.objective, atol=1e-5, rtol=1e-5)
        want.objective.backward()
        got.objective.backward()
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
            a.grad = b.grad = None
    assert counters["stats"]["unique_graphs"] == 2  # one block graph for the 3 blocks, one for the loss
