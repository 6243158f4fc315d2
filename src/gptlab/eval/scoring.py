"""Log-likelihood of a continuation given a context, for any gptlab GPT: the one scorer behind the zero-shot tasks
(gptlab.eval.zeroshot), the training callback and the lm-eval adapter.

It only calls the model's forward, so every variant (positions, norms, attention kinds) is scored the same way.
Rows are right-padded into batches: attention is causal, so the padding after a row's last token never reaches
the positions that are scored, and no attention mask is needed. Log-probabilities are taken over the tokenizer's
real ids (`config.vocab_size`), not the padded vocabulary, as sampling does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError
from gptlab.model import GPT

Pair = tuple[list[int], list[int]]  # (context ids, continuation ids)
BatchHook = Optional[Callable[[], None]]  # called before each batch; raising there abandons the scoring


@dataclass(frozen=True)
class Score:
    logprob: float  # sum over the continuation's tokens of log p(token | everything before it)
    n_tokens: int  # tokens in the continuation
    greedy: bool  # the argmax at every continuation position is the continuation's token


def encode_pair(tokenizer: Tokenizer, context: str, continuation: str) -> Pair:
    """Ids of context and continuation, encoded separately so the continuation's tokens are exactly its own.
    Whitespace at the end of the context moves to the start of the continuation (" word" is one BPE token,
    "word" after a trailing space is not), and an empty context becomes end-of-text, so the first continuation
    token is predicted from something."""
    stripped = context.rstrip()
    continuation = context[len(stripped):] + continuation
    return tokenizer.encode(stripped) or [tokenizer.eot_id], tokenizer.encode(continuation)


def fit_to_block(pair: Pair, block_size: int) -> tuple[list[int], int]:
    """The model's input for a pair (context + continuation minus its last id, left-truncated to block_size)
    and how many continuation tokens it predicts (its last positions)."""
    context, continuation = pair
    if not continuation:
        raise ConfigError("an empty continuation has no tokens to score; every example needs a target.")
    if len(continuation) > block_size:
        raise ConfigError(f"a continuation of {len(continuation)} tokens is longer than the model's context "
                          f"({block_size} tokens), so no context fits before it; score shorter continuations (the "
                          "task's rows with a shorter target).")
    tokens = (context + continuation)[-(block_size + 1):]
    return tokens[:-1], len(continuation)


@torch.no_grad()
def score_pairs(model: GPT, pairs: Sequence[Pair], batch_size: int = 16, before_batch: BatchHook = None) -> list[Score]:
    """A Score per pair, in order, computed on the model's device. Pairs are sorted by length so a batch holds
    similar lengths; the result does not depend on that order beyond float rounding. The model is put in eval
    mode and restored. `before_batch` lets a caller stop between batches (training's callback, on a preemption
    signal)."""
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer.")
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    inputs = [fit_to_block(pair, model.config.block_size) for pair in pairs]
    order = sorted(range(len(pairs)), key=lambda i: -len(inputs[i][0]))
    scores: list[Optional[Score]] = [None] * len(pairs)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            if before_batch is not None:
                before_batch()
            rows = order[start:start + batch_size]
            width = max(len(inputs[i][0]) for i in rows)
            idx = torch.zeros(len(rows), width, dtype=torch.long)
            for r, i in enumerate(rows):
                ids = inputs[i][0]
                idx[r, :len(ids)] = torch.tensor(ids)
            logits = model(idx.to(device))
            sums, greedy = [], []
            for r, i in enumerate(rows):
                ids, n = inputs[i]
                # Only the positions that predict the continuation are normalised: a (batch, T, vocab) float copy
                # of the logits would be GBs for a 50k vocabulary.
                logprobs = logits[r, len(ids) - n:len(ids), :vocab].float().log_softmax(dim=-1)
                want = torch.tensor(pairs[i][1], device=device)
                sums.append(logprobs.gather(-1, want[:, None]).sum())
                greedy.append((logprobs.argmax(dim=-1) == want).all())
            # one transfer per batch, not two per row (each a GPU sync)
            for i, logprob, is_greedy in zip(rows, torch.stack(sums).tolist(), torch.stack(greedy).tolist()):
                scores[i] = Score(logprob, inputs[i][1], is_greedy)
    finally:
        model.train(was_training)
    return scores  # type: ignore[return-value]


def score_texts(model: GPT, tokenizer: Tokenizer, requests: Sequence[tuple[str, str]],
                batch_size: int = 16, before_batch: BatchHook = None) -> list[Score]:
    """`score_pairs` for (context, continuation) strings."""
    return score_pairs(model, [encode_pair(tokenizer, c, t) for c, t in requests], batch_size, before_batch)
