"""Compute and memory plan for a training run, from the model's own parameter and FLOPs count; the memory estimate
here is the one train's memory check compares with the machine (gptlab.preflight.guards), so the planner and the
check give the same bytes for the same config.

Memory follows the usual mixed-precision accounting (ZeRO, Rajbhandari et al. 2020): 16 bytes per parameter of
weights, gradients and Adam's two moments (Lightning keeps fp32 master weights under bf16 autocast).
DDP replicates all of it on every GPU; FSDP (ZeRO-3) divides it by the number of GPUs. Activations follow
Korthikanti et al. 2022 ("Reducing Activation Recomputation"), generalised to D_K, D_V and d_ff that are not
tied to D, with fused attention (SDPA/flash) so no T x T score matrix is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from gptlab.config.fsdp_keys import is_fsdp
from gptlab.execution.peak_flops import lookup
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters, training_flops_per_token

# The GPUs a plan is priced on: dense bf16 peak and memory from the one peak table MFU uses (execution/peak_flops.py).
GPUS = {kind: {"peak_flops": lookup(f"NVIDIA {kind}").bf16, "memory_bytes": lookup(f"NVIDIA {kind}").memory_bytes}
        for kind in ("A100", "H100", "H200")}
BYTES_PER_PARAM = {"weights": 2, "gradients": 2, "optimizer": 12}  # bf16, bf16, fp32 master + m + v (doctor's split)
GB = 1e9
PROCESS_OVERHEAD_BYTES = 0.6 * GB  # the Python + torch + Lightning runtime of one process, measured ~0.5-0.6 GB
# fp32 weights, fp32 grads and Adam's two fp32 moments: 16 bytes a parameter, also under mixed precision
# (Lightning keeps fp32 master weights and autocasts the matmuls).
STATE_BYTES_PER_PARAM = 16


@dataclass
class Plan:
    parameters: int
    flops_per_token: int
    tokens: float
    total_flops: float
    gpus: int
    block_size: int
    micro_batch: int
    ddp: dict[str, float]  # bytes per GPU by part (estimate_memory's), at the run's micro-batch and precision
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


@dataclass
class MemoryEstimate:
    parameters: int
    states: float  # weights, gradients and optimizer states held by one process
    activations: float  # kept for backward, for one micro-batch
    processes: int  # processes sharing the memory compared against (CPU: all ranks of the node; GPU: 1)
    sharded_over: int

    @property
    def per_process(self) -> float:
        return self.states + self.activations + PROCESS_OVERHEAD_BYTES

    @property
    def total(self) -> float:
        return self.per_process * self.processes


def estimate_memory(model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any, accelerator: str,
                    activation_checkpointing: Optional[bool] = None,
                    parameters: Optional[int] = None) -> MemoryEstimate:
    """The memory of this run: per process, and how many processes share one memory (train's check, the planner).
    `parameters`: the model's count when the caller has it already (count_parameters)."""
    devices = trainer_cfg.get("devices", 1)
    devices = 1 if devices == "auto" else int(devices)
    world = devices * int(trainer_cfg.get("num_nodes", 1))
    strategy = trainer_cfg.get("strategy")
    fsdp = is_fsdp(strategy)
    shards = world if fsdp else 1
    checkpointing = fsdp if activation_checkpointing is None else activation_checkpointing  # Runtime.checkpoints_blocks
    acts = activation_bytes(model_cfg, micro_batch)
    activations = acts["activations_checkpointed" if checkpointing else "activations"]
    if str(trainer_cfg.get("precision", "32-true")).startswith(("32", "64")):
        activations *= 2  # the planner counts bf16 activations; fp32 runs keep 4 bytes each
    n_params = count_parameters(model_cfg)["total"] if parameters is None else parameters
    return MemoryEstimate(
        parameters=n_params,
        states=STATE_BYTES_PER_PARAM * n_params / shards,
        activations=activations,
        processes=devices if accelerator == "cpu" else 1,
        sharded_over=shards,
    )


def fitting_micro_batch(model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any, accelerator: str,
                        activation_checkpointing: Optional[bool], free: float) -> Optional[int]:
    """The largest micro-batch below `micro_batch` whose estimate fits in `free` bytes (None: not even 1), so a
    refusal's suggested data.batch_size is one that passes the same check."""
    def fits(size: int) -> bool:
        return estimate_memory(model_cfg, size, trainer_cfg, accelerator, activation_checkpointing).total <= free

    if micro_batch <= 1 or not fits(1):
        return None
    low, high = 1, micro_batch - 1  # fits(low); the estimate grows with the batch, so bisect (data.batch_size=1e8)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _per_gpu(model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any) -> dict[str, float]:
    """estimate_memory's bytes on one GPU, as the run checkpoints (runtime.activation_checkpointing's default: on
    under FSDP only) and with activation checkpointing."""
    plain = estimate_memory(model_cfg, micro_batch, trainer_cfg, "gpu")  # as the run checkpoints (FSDP: on)
    checkpointed = estimate_memory(model_cfg, micro_batch, trainer_cfg, "gpu", activation_checkpointing=True)
    return {"states": plain.states, "activations": plain.activations,
            "activations_checkpointed": checkpointed.activations, "runtime": PROCESS_OVERHEAD_BYTES,
            "total": plain.per_process, "total_checkpointed": checkpointed.per_process}


def make_plan(cfg: GPTConfig, tokens: float, gpus: int, micro_batch: int = 1, mfu: float = 0.4,
              trainer_cfg: Optional[dict[str, Any]] = None) -> Plan:
    """`trainer_cfg`: the run's trainer (devices, nodes, precision, strategy; default bf16 DDP on `gpus` GPUs); the
    plan gives its memory under its own strategy and under the other one (DDP or FSDP over all its GPUs)."""
    n_params = count_parameters(cfg)["total"]
    flops_per_token = training_flops_per_token(cfg)["total"]
    total = flops_per_token * tokens
    trainer = dict(trainer_cfg or {"devices": gpus, "num_nodes": 1, "precision": "bf16-mixed"})
    return Plan(
        parameters=n_params,
        flops_per_token=flops_per_token,
        tokens=tokens,
        total_flops=total,
        gpus=gpus,
        block_size=cfg.block_size,
        micro_batch=micro_batch,
        ddp=_per_gpu(cfg, micro_batch, trainer if not is_fsdp(trainer.get("strategy")) else
                     {**trainer, "strategy": "ddp"}),
        fsdp=_per_gpu(cfg, micro_batch, trainer if is_fsdp(trainer.get("strategy")) else
                      {**trainer, "strategy": {"_target_": "fsdp"}}),
        days={kind: total / (gpus * spec["peak_flops"] * mfu) / 86400 for kind, spec in GPUS.items()},
    )


def duration(days: float) -> str:
    """Days, or hours or minutes when it is under a day ("0.0 days" said nothing)."""
    if days >= 1:
        return f"{days:,.1f} days"
    return f"{days * 24:.1f} hours" if days * 24 >= 1 else f"{max(days * 1440, 0.1):.1f} minutes"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB"


def format_plan(plan: Plan, name: str, mfu: float, strategy: str) -> str:
    """`strategy`: "DDP" or "FSDP", the run's own (its column is marked)."""
    own = {label: " (this run)" if label == strategy else "" for label in ("DDP", "FSDP")}
    lines = [
        f"{name}: {plan.parameters:,} parameters",
        f"training FLOPs per token: {plan.flops_per_token:,} (6N = {6 * plan.parameters:,} + attention)",
        f"tokens: {plan.tokens:,.0f}   total training FLOPs: {plan.total_flops:.3e}   "
        f"(6ND alone: {6 * plan.parameters * plan.tokens:.3e})",
        "",
        f"memory per GPU (train's memory check; Adam; activations of micro-batch data.batch_size={plan.micro_batch} "
        f"x {plan.block_size} tokens):",
        f"{'':<28}{'DDP' + own['DDP']:>18}{f'FSDP / {plan.gpus}' + own['FSDP']:>22}",
    ]
    for part in ("states", "activations", "activations_checkpointed", "runtime", "total", "total_checkpointed"):
        lines.append(f"{part:<28}{_gb(plan.ddp[part]):>18}{_gb(plan.fsdp[part]):>22}")
    lines.append("")
    for kind, spec in GPUS.items():
        verdicts = []
        for label, mem in (("DDP", plan.ddp), ("FSDP", plan.fsdp)):
            need = min(mem["total"], mem["total_checkpointed"])  # with checkpointing if that is what it takes
            fits = "fits" if need <= spec["memory_bytes"] else "does not fit"
            verdicts.append(f"{label} {fits} ({need / 1e9:,.1f} GB)")
        lines.append(
            f"{kind} ({spec['memory_bytes'] / 1e9:.0f} GB, {spec['peak_flops'] / 1e12:.0f} TFLOP/s bf16): "
            f"{duration(plan.days[kind])} on {plan.gpus} GPU(s) at {mfu:.0%} MFU; {'; '.join(verdicts)}"
        )
    return "\n".join(lines)
