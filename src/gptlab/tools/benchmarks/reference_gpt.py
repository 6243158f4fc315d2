"""A hand-written GPT-2 in the style researchers write from scratch: the benchmarks' reference.

Written here from the formulas of docs/model.md (pre-LN blocks, eq. 9-10; fused QKV projection; causal SDPA; tanh
GELU, eq. 8; tied head), not imported from gptlab.model, so the benchmark compares gptlab against code
that owes nothing to it. It computes the same function as `GPT(cfg)` for a pre-LN, learned-position, dense
config, so `load_from` can copy gptlab's weights into it and the two losses must agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, eps: float) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(n_embd, eps=eps)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln2 = nn.LayerNorm(n_embd, eps=eps)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class ReferenceGPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int, eps: float = 1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(_Block(n_embd, n_head, eps) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=eps)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-token cross-entropy (eq. 13)."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @torch.no_grad()
    def load_from(self, gpt: nn.Module) -> ReferenceGPT:
        """Copy a gptlab GPT's weights (pre-LN, learned positions, dense, tied), so both compute the same loss."""
        self.wte.weight.copy_(gpt.tok_emb.weight)
        self.wpe.weight.copy_(gpt.pos_emb.weight)
        self.ln_f.load_state_dict(gpt.final_norm.state_dict())
        for mine, theirs in zip(self.blocks, gpt.blocks):
            mine.ln1.load_state_dict(theirs.norm_1.state_dict())
            mine.ln2.load_state_dict(theirs.norm_2.state_dict())
            mine.c_attn.load_state_dict(theirs.attn.qkv.state_dict())
            mine.c_proj.load_state_dict(theirs.attn.out.state_dict())
            mine.fc.load_state_dict(theirs.mlp.layers[0].state_dict())
            mine.proj.load_state_dict(theirs.mlp.layers[2].state_dict())
        return self
