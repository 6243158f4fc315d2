"""runtime.compile=true: the compiled forward that training and validation call computes the eager model's logits,
loss and gradients (to float tolerance), compiles once per shape and grad mode (never per step), and sampling
never goes through it."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

from gptlab.model import GPT, GPTConfig, next_token_loss
from gptlab.train.module import GPTLitModule

CFG = dict(vocab_size=61, block_size=16, n_layer=1, n_head=2, n_embd=32)


def test_compiled_forward_matches_eager_and_does_not_recompile_per_step() -> None:
    torch.manual_seed(0)
    eager = GPT(GPTConfig(**CFG))
    compiled = GPT(GPTConfig(**CFG))
    compiled.load_state_dict(eager.state_dict())
    module = GPTLitModule(compiled, compile=True)
    assert module.forward_fn is not compiled.forward  # the compiled one
    assert set(module.state_dict()) == {f"model.{k}" for k in eager.state_dict()} | {
        k for k in module.state_dict() if k.startswith("val_loss")}  # no `_orig_mod` keys from compiling

    torch._dynamo.reset()
    counters.clear()
    for step in range(3):  # training steps: same shape, compiled once
        x = torch.randint(0, 61, (4, 16), generator=torch.Generator().manual_seed(step))
        want = next_token_loss(eager(x), x)
        got = next_token_loss(module.forward_fn(x), x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        want.backward()
        got.backward()
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
            a.grad = b.grad = None
    after_training = counters["stats"]["unique_graphs"]
    assert after_training >= 1

    compiled.eval()
    with torch.no_grad():
        for step in range(3):  # validation: no grad, plus a last partial batch of another size
            x = torch.randint(0, 61, (4 if step < 2 else 3, 16))
            torch.testing.assert_close(module.forward_fn(x), eager.eval()(x), atol=1e-5, rtol=1e-5)
    after_validation = counters["stats"]["unique_graphs"]
    assert after_validation - after_training <= 2  # one graph per new (grad mode, shape), not one per batch

    # Sampling: a new length every token; the plain model runs it, nothing more is compiled.
    out = compiled.generate(torch.zeros(1, 1, dtype=torch.long), 10, temperature=0.0)
    assert out.shape == (1, 11)
    assert counters["stats"]["unique_graphs"] == after_validation
