"""Weight decay groups and the warmup + cosine schedule."""

from __future__ import annotations

import math

import pytest
import torch

from gptlab.model import GPT, GPTConfig
from gptlab.train.optim import warmup_cosine, weight_decay_groups


def test_only_matrices_and_embeddings_decay() -> None:
    model = GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=16))
    decay, no_decay = weight_decay_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == model.num_parameters()
    assert any(p is model.tok_emb.weight for p in decay["params"])


def test_warmup_then_cosine_to_min_ratio() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_cosine(opt, total_steps=110, warmup_steps=10, min_lr_ratio=0.1)
    lrs = []
    for _ in range(120):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # linear warmup to the peak
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # mid-decay
    assert lrs[110] == pytest.approx(0.1) and lrs[119] == pytest.approx(0.1)  # floor at 10%
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
