"""Compute and memory plan for a training run, from the model's own parameter and FLOPs count.

Memory follows the usual mixed-precision accounting (ZeRO, Rajbhandari et al. 2020): 2 bytes of bf16
weights + 2 of bf16 gradients + 12 of fp32 master weights and Adam's two moments = 16 bytes per parameter.
DDP replicates all of it on every GPU; FSDP (ZeRO-3) divides it by the number of GPUs. Activations follow
Korthikanti et al. 2022 ("Reducing Activation Recomputation"), generalised to D_K, D_V and d_ff that are not
tied to D, with fused attention (SDPA/flash) so no T x T score matrix is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters, training_flops_per_token

# Dense bf16 peak of the SXM parts (vendor datasheets) and their memory; MFU is quoted against these.
GPUS = {
    "A100": {"peak_flops": 312e12, "memory_bytes": 80e9},
    "H100": {"peak_flops": 989e12, "memory_bytes": 80e9},
    "H200": {"peak_flops": 989e12, "memory_bytes": 141e9},
}
BYTES_PER_PARAM = {"weights": 2, "gradients": 2, "optimizer": 12}  # bf16, bf16, fp32 master + m + v


@dataclass
class Plan:
    parameters: int
    flops_per_token: int
    tokens: float
    total_flops: float
    gpus: int
    block_size: int
    ddp: dict[str, float]  # bytes per GPU by part
    fsdp: dict[str, float]
    days: dict[str, float]  # by GPU kind, at the given MFU


def activation_bytes(cfg: GPTConfig, micro_batch: int) -> dict[str, float]:
    """Bytes of activations kept for backward, per GPU, for one micro-batch of full-length sequences."""
    tokens = micro_batch * cfg.block_size
    q, v = cfg.n_head * cfg.head_dim, cfg.n_head * cfg.v_head_dim
    # Per token per block, bf16: two LayerNorm inputs and outputs (8D), Q and K (4q), V and the attention
    # output (4v), the MLP's two hidden activations (4 d_ff), two dropout masks (2D, one byte each).
    # With q = v = D and d_ff = 4D this is Korthikanti's 34·D.
    per_block = tokens * (10 * cfg.n_embd + 4 * q + 4 * v + 4 * cfg.d_ff)
    logits = tokens * cfg.padded_vocab_size * 6  # bf16 logits and their fp32 softmax for the loss
    full = cfg.n_layer * per_block + logits
    # Checkpointing keeps each block's bf16 input and recomputes one block at a time in backward.
    checkpointed = cfg.n_layer * tokens * 2 * cfg.n_embd + per_block + logits
    return {"activations": float(full), "activations_checkpointed": float(checkpointed)}


def memory_per_gpu(n_params: int, shards: int, activations: dict[str, float]) -> dict[str, float]:
    states = {part: n_params * nbytes / shards for part, nbytes in BYTES_PER_PARAM.items()}
    states.update(activations)
    states["total"] = sum(states[p] for p in BYTES_PER_PARAM) + activations["activations"]
    states["total_checkpointed"] = sum(states[p] for p in BYTES_PER_PARAM) + activations["activations_checkpointed"]
    return states


def make_plan(cfg: GPTConfig, tokens: float, gpus: int, micro_batch: int = 1, mfu: float = 0.4) -> Plan:
    n_params = count_parameters(cfg)["total"]
    flops_per_token = training_flops_per_token(cfg)["total"]
    total = flops_per_token * tokens
    activations = activation_bytes(cfg, micro_batch)
    return Plan(
        parameters=n_params,
        flops_per_token=flops_per_token,
        tokens=tokens,
        total_flops=total,
        gpus=gpus,
        block_size=cfg.block_size,
        ddp=memory_per_gpu(n_params, 1, activations),
        fsdp=memory_per_gpu(n_params, gpus, activations),
        days={kind: total / (gpus * spec["peak_flops"] * mfu) / 86400 for kind, spec in GPUS.items()},
    )


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB"


def format_plan(plan: Plan, name: str, mfu: float, micro_batch: int) -> str:
    lines = [
        f"{name}: {plan.parameters:,} parameters",
        f"training FLOPs per token: {plan.flops_per_token:,} (6N = {6 * plan.parameters:,} + attention)",
        f"tokens: {plan.tokens:,.0f}   total training FLOPs: {plan.total_flops:.3e}   "
        f"(6ND alone: {6 * plan.parameters * plan.tokens:.3e})",
        "",
        f"memory per GPU (bf16 mixed precision + Adam; activations of {micro_batch} sequence(s) of "
        f"{plan.block_size} tokens):",
        f"{'':<28}{'DDP':>14}{f'FSDP / {plan.gpus}':>14}",
    ]
    for part in ("weights", "gradients", "optimizer", "activations", "activations_checkpointed", "total",
                 "total_checkpointed"):
        lines.append(f"{part:<28}{_gb(plan.ddp[part]):>14}{_gb(plan.fsdp[part]):>14}")
    lines.append("")
    for kind, spec in GPUS.items():
        verdicts = []
        for label, mem in (("DDP", plan.ddp), ("FSDP", plan.fsdp)):
            need = min(mem["total"], mem["total_checkpointed"])  # with checkpointing if that is what it takes
            fits = "fits" if need <= spec["memory_bytes"] else "does not fit"
            verdicts.append(f"{label} {fits} ({need / 1e9:,.1f} GB)")
        lines.append(
            f"{kind} ({spec['memory_bytes'] / 1e9:.0f} GB, {spec['peak_flops'] / 1e12:.0f} TFLOP/s bf16): "
            f"{plan.days[kind]:,.1f} days on {plan.gpus} GPUs at {mfu:.0%} MFU; {'; '.join(verdicts)}"
        )
    return "\n".join(lines)
