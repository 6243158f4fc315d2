"""Next-token loss: NLL of the true next token (eq. 13); label smoothing is eq. 12's soft targets.

`model_loss` is the model's forward and its loss as one function: what runtime.compile compiles (nanoGPT's
`forward(idx, targets)`), so inductor fuses the head, the fp32 log-softmax and the NLL and never stores an fp32 copy
of the (B*T x vocab) logits, the largest tensor of a GPT-2 step. Rows added by model.pad_vocab_to are cut off the
logits before the softmax: a padded model computes exactly the unpadded model's loss, and those rows never learn.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from gptlab.model.mtp import mtp_term


class LossParts(NamedTuple):
    objective: torch.Tensor  # what backward runs on: ce + z_loss * z (+ the multi-token term, model/mtp.py)
    ce: torch.Tensor  # the mean cross-entropy (with label smoothing when set): train/loss
    z: Optional[torch.Tensor]  # mean log^2 Z (train/z_loss); None when model.z_loss is 0


def loss_parts(logits: torch.Tensor, targets: torch.Tensor, vocab_size: Optional[int] = None,
               label_smoothing: float = 0.0, z_loss: float = 0.0, mtp: Optional[torch.Tensor] = None) -> LossParts:
    """The training objective from (B, T, V) logits: cross-entropy over the first `vocab_size` ids (all when None),
    plus PaLM's z-loss (Chowdhery et al. 2022, §5) times `z_loss` when it is non-zero, plus the multi-token term
    with weights `mtp` (K,) when given (model/mtp.py)."""
    if vocab_size is not None and logits.size(-1) > vocab_size:
        logits = logits[..., :vocab_size]
    # fp32 first, then the view: one copy of a sliced bf16 tensor (eager; compiled, inductor fuses it away)
    flat = logits.float().reshape(-1, logits.size(-1))
    ce = F.cross_entropy(flat, targets.reshape(-1), label_smoothing=label_smoothing)
    objective = ce if mtp is None else ce + mtp_term(logits, targets, mtp, label_smoothing)
    if not z_loss:
        return LossParts(objective, ce, None)
    z = z_loss_term(flat)
    return LossParts(objective + z_loss * z, ce, z)


def model_loss(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor, doc_ids: Optional[torch.Tensor] = None,
               label_smoothing: float = 0.0, z_loss: float = 0.0, mtp: Optional[torch.Tensor] = None) -> LossParts:
    """`model`'s logits for idx (with document masking when doc_ids is given) and their LossParts."""
    logits = model(idx, doc_ids=doc_ids) if doc_ids is not None else model(idx)
    return loss_parts(logits, targets, model.config.vocab_size, label_smoothing, z_loss, mtp)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over all positions; `targets` are the inputs shifted left by one."""
    return loss_parts(logits, targets, label_smoothing=label_smoothing).ce


def z_loss_term(logits: torch.Tensor) -> torch.Tensor:
    """PaLM's auxiliary term: mean over positions of log^2 Z, Z = sum_v exp(logit_v). Added to the training loss
    times model.z_loss, it keeps the softmax normaliser near 1 (log Z near 0)."""
    return logits.float().logsumexp(dim=-1).square().mean()
