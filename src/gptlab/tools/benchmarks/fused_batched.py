"""The other implementation issue 42 asks to measure against torch.func's vmap (execution/fused.py): k GPTs as
batched modules, HFTA's way (Wang et al., MLSys 2021). Every linear is one torch.baddbmm over the members' stacked
weights, attention one SDPA call on k*B sequences, each norm one kernel without affine followed by each member's
gain and bias, the tied head one torch.bmm. Written out for the nano architecture only (pre-LN, learned positions,
tied head, GELU-tanh MLP of two layers, biases): a prototype for scripts/bench_fused.py, not used by training. It
computes the same loss as the model (scripts/bench_fused.py prints the largest difference), not bitwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gptlab.model import GPT


def supports(model: GPT) -> bool:
    """Whether `model` is the architecture this prototype writes out."""
    cfg = model.config
    return (cfg.norm == "pre" and cfg.pos_emb == "learned" and cfg.tie_weights and cfg.activation == "gelu_tanh"
            and cfg.attn_bias and cfg.mlp_bias and cfg.mlp_layers == 2 and cfg.norm_type == "layernorm"
            and cfg.attn_pattern == ["dense"] and not cfg.qk_norm and cfg.z_loss == 0 and cfg.dropout == 0
            and cfg.padded_vocab_size == cfg.vocab_size)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """(k, N, in) @ (k, out, in)^T + (k, out): every member's linear in one call."""
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


def _norm(x: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], eps=eps) * gain.unsqueeze(1) + bias.unsqueeze(1)


def batched_losses(model: GPT, params: dict[str, torch.Tensor], idx: torch.Tensor,
                   targets: torch.Tensor) -> torch.Tensor:
    """Each member's mean next-token loss, (k,), for `params` stacked member-first (named as `model`'s) on `idx`
    and `targets` (k, B, T)."""
    cfg = model.config
    k, B, T = idx.shape
    C, H, eps = cfg.n_embd, cfg.n_head, cfg.layer_norm_eps
    wte = params["tok_emb.weight"]  # (k, V, C)
    x = wte[torch.arange(k, device=idx.device).view(k, 1, 1), idx] + params["pos_emb.weight"][:, None, :T]
    x = x.reshape(k, B * T, C)
    for i in range(cfg.n_layer):
        p = {name[len(f"blocks.{i}."):]: t for name, t in params.items() if name.startswith(f"blocks.{i}.")}
        h = _norm(x, p["norm_1.weight"], p["norm_1.bias"], eps)
        q, k_, v = (t.reshape(k * B, T, H, C // H).transpose(1, 2)
                    for t in _linear(h, p["attn.qkv.weight"], p["attn.qkv.bias"]).split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k_, v, is_causal=True)  # k*B sequences in one kernel call
        x = x + _linear(y.transpose(1, 2).reshape(k, B * T, C), p["attn.out.weight"], p["attn.out.bias"])
        h = _norm(x, p["norm_2.weight"], p["norm_2.bias"], eps)
        h = F.gelu(_linear(h, p["mlp.layers.0.weight"], p["mlp.layers.0.bias"]), approximate="tanh")
        x = x + _linear(h, p["mlp.layers.2.weight"], p["mlp.layers.2.bias"])
    x = _norm(x, params["final_norm.weight"], params["final_norm.bias"], eps)
    logits = torch.bmm(x, wte.transpose(1, 2))  # (k, B*T, V): the tied head
    losses = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return losses.view(k, -1).mean(dim=1)


def batched_step(models: list[GPT], batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[list[torch.Tensor]]:
    """Each member's loss gradients (in `named_parameters` order) from one batched forward and backward, stacking
    and unstacking as fused_step does, so the two are timed doing the same work around the model."""
    names = [n for n, _ in models[0].named_parameters()]
    own = [dict(m.named_parameters()) for m in models]
    params = {n: torch.stack([p[n].detach() for p in own]).requires_grad_() for n in names}
    idx = torch.stack([x for x, _ in batches])
    targets = torch.stack([y for _, y in batches])
    batched_losses(models[0], params, idx, targets).sum().backward()
    return [[params[n].grad[i] for n in names] for i in range(len(models))]
