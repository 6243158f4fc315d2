"""runtime.compile=true: the model and its loss compiled as one graph (execution/parallelize.py) compute the eager
model's loss and gradients (to float tolerance), compile once per shape and grad mode (never per step), keep the
model's state_dict keys, and sampling never goes through them."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

from gptlab.config.schemas import Runtime
from gptlab.execution.parallelize import parallelize
from gptlab.model import GPT, GPTConfig
from gptlab.model.loss import model_loss
from gptlab.train.module import GPTLitModule

CFG = dict(vocab_size=61, block_size=16, n_layer=1, n_head=2, n_embd=32, pad_vocab_to=64, z_loss=1e-3)
CPU = torch.device("cpu")


def test_compiled_model_and_loss_match_eager_and_do_not_recompile_per_step() -> None:
    torch.manual_seed(0)
    eager = GPT(GPTConfig(**CFG))
    compiled = GPT(GPTConfig(**CFG))
    compiled.load_state_dict(eager.state_dict())
    loss_fn = parallelize(compiled, Runtime(compile=True), CPU)
    module = GPTLitModule(compiled)
    assert set(module.state_dict()) == {f"model.{k}" for k in eager.state_dict()} | {
        k for k in module.state_dict() if k.startswith("val_loss")}  # no `_orig_mod` keys from compiling

    torch._dynamo.reset()
    counters.clear()
    for step in range(3):  # training steps: same shape, compiled once
        x = torch.randint(0, 61, (4, 16), generator=torch.Generator().manual_seed(step))
        want = model_loss(eager, x, x, label_smoothing=0.1, z_loss=1e-3)
        got = loss_fn(x, x, None, 0.1, 1e-3)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        want.objective.backward()
        got.objective.backward()
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
            a.grad = b.grad = None
    after_training = counters["stats"]["unique_graphs"]
    assert after_training >= 1

    compiled.eval()
    eager.eval()
    with torch.no_grad():
        for step in range(3):  # validation: no grad, plain NLL, plus a last partial batch of another size
            x = torch.randint(0, 61, (4 if step < 2 else 3, 16))
            torch.testing.assert_close(loss_fn(x, x).ce, model_loss(eager, x, x).ce, atol=1e-5, rtol=1e-5)
    after_validation = counters["stats"]["unique_graphs"]
    assert after_validation - after_training <= 2  # one graph per new (grad mode, shape), not one per batch

    # Sampling: a new length every token; the plain model runs it, nothing more is compiled.
    out = compiled.generate(torch.zeros(1, 1, dtype=torch.long), 10, temperature=0.0)
    assert out.shape == (1, 11) and int(out.max()) < 61  # padded ids are never sampled
    assert counters["stats"]["unique_graphs"] == after_validation
