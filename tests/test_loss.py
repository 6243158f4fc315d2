"""The training loss (model/loss.py) against F.cross_entropy on fp32 logits: the value and the gradients, with
label smoothing and z-loss, and with the rows model.pad_vocab_to adds cut off before the softmax."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gptlab.model import GPT, GPTConfig
from gptlab.model.loss import loss_parts, model_loss


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_loss_parts_equal_fp32_cross_entropy_in_value_and_gradient(label_smoothing: float, z_loss: float) -> None:
    torch.manual_seed(0)
    vocab, padded = 50, 64
    logits = (3 * torch.randn(3, 7, padded, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(0, vocab, (3, 7))
    real = logits[..., :vocab].reshape(-1, vocab)
    want_ce = F.cross_entropy(real, targets.reshape(-1), label_smoothing=label_smoothing)
    want = want_ce + z_loss * (real.logsumexp(-1) ** 2).mean()
    (want_grad,) = torch.autograd.grad(want, logits)

    parts = loss_parts(logits.float(), targets, vocab, label_smoothing, z_loss)
    (got_grad,) = torch.autograd.grad(parts.objective, logits)
    torch.testing.assert_close(parts.ce.double(), want_ce, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(parts.objective.double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-6, atol=1e-6)
    assert got_grad[..., vocab:].abs().max() == 0  # padding rows get no gradient: they never learn
    assert (parts.z is None) == (z_loss == 0.0)


def test_padded_model_computes_the_unpadded_models_loss() -> None:
    """pad_vocab_to only adds rows: with the same real rows, the padded model's loss is the unpadded one's."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=61, block_size=8, n_layer=1, n_head=2, n_embd=16)
    plain, padded = GPT(GPTConfig(**cfg)), GPT(GPTConfig(**cfg, pad_vocab_to=64))
    state = {k: (v if v.shape == padded.state_dict()[k].shape else
                 torch.cat([v, torch.randn(3, v.shape[1])])) for k, v in plain.state_dict().items()}
    padded.load_state_dict(state)
    x = torch.randint(0, 61, (2, 8))
    torch.testing.assert_close(model_loss(padded, x, x).ce, model_loss(plain, x, x).ce)
