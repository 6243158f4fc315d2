"""The cost of document masking: one GPT training step (forward + backward) on packed windows, with and without
data.document_masking, on the same weights and batch.

Masked and unmasked steps alternate (interleaved), and each keeps its best of N, so that load from other
processes, which only ever adds time, hits both alike. Documents are cut at random with a mean length; the
masked step includes building the document ids' positions and masks, as a training step does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gptlab.model import GPT, GPTConfig


@dataclass(frozen=True)
class MaskingCase:
    T: int
    pattern: str = "dense"  # one kind for every layer: dense | local | strided
    pos_emb: str = "learned"
    doc_len: int = 128  # mean document length in tokens
    B: int = 4
    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    window: int = 128


def _batch(case: MaskingCase) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 256, (case.B, case.T), generator=g)
    ends = torch.rand(case.B, case.T, generator=g) < 1.0 / case.doc_len  # each token ends a document w.p. 1/len
    ids = ends.to(torch.int32).cumsum(-1, dtype=torch.int32) - ends.to(torch.int32)
    return idx, ids


def time_steps(case: MaskingCase, repeats: int) -> tuple[float, float]:
    """Best (unmasked, masked) milliseconds of one forward+backward, interleaved."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=257, block_size=case.T, n_layer=case.n_layer, n_head=case.n_head,
                          n_embd=case.n_embd, pos_emb=case.pos_emb, attn_pattern=[case.pattern],
                          attn_window=case.window))
    idx, ids = _batch(case)

    def step(doc_ids: torch.Tensor | None) -> float:
        start = time.perf_counter()
        model(idx, doc_ids=doc_ids).float().square().mean().backward()
        model.zero_grad(set_to_none=True)
        return 1e3 * (time.perf_counter() - start)

    step(None), step(ids)  # warm-up
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        best[0] = min(best[0], step(None))
        best[1] = min(best[1], step(ids))
    return best[0], best[1]
