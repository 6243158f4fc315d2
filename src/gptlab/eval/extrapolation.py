"""Length extrapolation (Press et al. 2022, "Train Short, Test Long"): a checkpoint's loss at contexts other than the
one it was trained at, and its loss at each position of the window.

Protocol: non-overlapping windows. Every context L cuts the same span of the validation tokens into windows of L
tokens (inputs w[:-1], targets w[1:], as data.windows.SequentialWindows), so every context scores exactly the same
targets and the losses compare. The span is the longest prefix of the split whose length is a multiple of every
context. A longer window gives its later tokens more context: position p of a window sees p earlier tokens, so the
mean over a window of 4T tokens includes positions the model never saw in training, and also positions 0..T-1 that
it scores exactly as at T. The loss is a token mean (summed NLL over all scored targets, divided by their count),
never a mean of batch means; the loss by position is the same sum taken per position p = 0..L-1 over all windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import reduce
from typing import Callable, ContextManager, Optional

import numpy as np
import torch
import torch.nn.functional as F

from gptlab.data.documents import document_ids
from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig
from gptlab.model.context import longest_context


def context_refusal(config: GPTConfig, context: int, key: str = "contexts") -> Optional[str]:
    """Why the model cannot be scored at `context` tokens (None: it can)."""
    limit = longest_context(config)
    if limit is None or context <= limit:
        return None
    return (f"{key} has {context}, longer than this model can be scored at: model.pos_emb={config.pos_emb} is a "
            f"table of exactly model.block_size={limit} trained position vectors (the state_dict's pos_emb.weight, "
            f"{limit} x {config.n_embd}), and position {limit} has no row in it. Score it at contexts of at most "
            f"{limit}; alibi, rope, sinusoidal and none compute their positions for any length.")


def model_at_context(model: GPT, context: int) -> GPT:
    """The same weights, built for `context` positions: GPTConfig with a larger block_size, the state dict loaded
    into it. The rotary and sinusoidal tables are buffers outside the state dict (rebuilt for the new length), and
    ALiBi's bias is computed per call, so nothing else changes. A model already long enough is returned as it is."""
    if context <= model.config.block_size:
        return model
    refusal = context_refusal(model.config, context)
    if refusal:
        raise ConfigError(refusal)
    longer = GPT(replace(model.config, block_size=context)).to(next(model.parameters()).device)
    longer.load_state_dict(model.state_dict(), strict=True)
    return longer.eval()


def scored_span(n_tokens: int, contexts: list[int]) -> int:
    """Targets every context scores: the largest multiple of all the contexts (their lcm) that the split's
    n_tokens - 1 targets hold; 0 when none does."""
    step = reduce(math.lcm, contexts, 1)
    return (n_tokens - 1) // step * step


@dataclass(frozen=True)
class ContextScore:
    context: int
    windows: int
    tokens: int  # targets scored: windows x context
    loss: float  # token mean of the NLL, nats
    by_position: list[float]  # mean NLL at each position 0..context-1, over all windows

    @property
    def ppl(self) -> float:
        return math.exp(self.loss)


@torch.no_grad()
def score_context(model: GPT, tokens: np.ndarray, context: int, span: int, batch_windows: int,
                  device: torch.device, eot_id: Optional[int] = None,
                  forward_context: Callable[[], ContextManager] = torch.no_grad) -> ContextScore:
    """The NLL of the first `span` targets of `tokens`, in windows of `context`; `eot_id` set: document masking, as
    the run trained (each token sees its own document only, its positions counted from the document's start)."""
    model = model_at_context(model, context).eval()
    windows = span // context
    sums = torch.zeros(context, dtype=torch.float64)
    for first in range(0, windows, batch_windows):
        count = min(batch_windows, windows - first)
        chunk = np.asarray(tokens[first * context : (first + count) * context + 1]).astype(np.int64)
        ids = torch.from_numpy(chunk)
        x = ids[:-1].view(count, context).to(device)
        y = ids[1:].view(count, context).to(device)
        with forward_context():
            logits = model(x, doc_ids=document_ids(x, eot_id) if eot_id is not None else None)
        logits = logits[..., : model.config.vocab_size].float()  # padded rows are no tokens (model/loss.py)
        nll = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(count, context)
        sums += nll.sum(dim=0).double().cpu()
    return ContextScore(context, windows, windows * context, float(sums.sum() / (windows * context)),
                        (sums / windows).tolist())
