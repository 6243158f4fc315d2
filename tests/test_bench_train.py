"""scripts/bench_train.py's references compute what gptlab computes: the hand-written GPT with gptlab's weights
gives the same loss and gradients, and the plain loop runs the same config through validation and checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import CONF_DIR, TINY_MODEL

from gptlab.model import GPT, GPTConfig, next_token_loss
from gptlab.tools.benchmarks.fit import compare_fit, compose_train, plain_fit, step_cost
from gptlab.tools.benchmarks.reference_gpt import ReferenceGPT
from gptlab.tools.benchmarks.train_step import Shape, build


def test_reference_gpt_matches_gptlab_loss_and_gradients() -> None:
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=53, block_size=16, n_layer=2, n_head=2, n_embd=24))
    ref = ReferenceGPT(53, 16, 2, 2, 24).load_from(gpt)
    x, y = torch.randint(0, 53, (3, 16)), torch.randint(0, 53, (3, 16))
    a, b = next_token_loss(gpt(x), y), ref(x, y)
    torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-6)
    a.backward()
    b.backward()
    torch.testing.assert_close(ref.blocks[1].fc.weight.grad, gpt.blocks[1].mlp.layers[0].weight.grad, atol=1e-6,
                               rtol=1e-5)
    torch.testing.assert_close(ref.wte.weight.grad, gpt.tok_emb.weight.grad, atol=1e-6, rtol=1e-5)


def test_step_contenders_start_from_the_same_loss() -> None:
    shape = Shape(1, 2, 16, 8, 2, vocab_size=29)
    (_, first), (step, same) = build(shape, "gptlab", False), build(shape, "reference", False)
    assert float(first) == float(same)
    assert torch.isfinite(step())
    # The noise bound's contender: a separate copy of the same reference (its own weights, same values).
    again, loss = build(shape, "reference again", False)
    assert float(loss) == float(same) and torch.isfinite(again())
    with pytest.raises(ValueError, match="no step contender 'nanogpt'"):
        build(shape, "nanogpt", False)


def test_the_fit_noise_bound_runs_a_second_plain_loop() -> None:
    overrides = [*TINY_MODEL, "data.batch_size=2", "trainer.max_steps=2", "trainer.val_check_interval=2",
                 "trainer.accelerator=cpu", "trainer.limit_val_batches=1", "callbacks.text_samples.max_new_tokens=2"]
    best = compare_fit(CONF_DIR, overrides, repeats=1, noise=True)
    assert set(best) == {"gptlab", "plain", "plain again"}
    assert all(math.isfinite(seconds) and seconds > 0 for seconds in best.values()), best


def test_plain_loop_trains_the_run(tmp_path: Path) -> None:
    overrides = [*TINY_MODEL, "data.batch_size=4", "trainer.max_steps=6", "trainer.val_check_interval=3"]
    cfg = compose_train(CONF_DIR, overrides, tmp_path)
    assert plain_fit(cfg) > 0
    saved = torch.load(tmp_path / "plain.pt", weights_only=True)  # the checkpoint after the last validation
    assert set(saved) == {"model", "optimizer", "val"} and saved["val"] > 0


def test_step_cost_times_both_fits_per_step() -> None:
    per_step = step_cost(CONF_DIR, steps=4, repeats=1)
    assert set(per_step) == {"gptlab", "plain"}
    # What is timed, not how fast: no bound on seconds, which depend on the machine and its load.
    assert all(math.isfinite(seconds) and seconds > 0 for seconds in per_step.values()), per_step
