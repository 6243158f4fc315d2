"""Compute and memory plan for a training run, from the model's own parameter and FLOPs count; the memory estimate
here is the one train's memory check compares with the machine (gptlab.preflight.guards), so the planner and the
check give the same bytes for the same config.

Memory per process = states + communication buffers + activations + the runtime (docs/fsdp.md "How much memory",
where every term is written out):
- states: 16 bytes per parameter (fp32 weights, fp32 gradients, Adam's two fp32 moments; Lightning and FSDP2 keep
  fp32 master weights under bf16 autocast), divided by the ranks under FSDP (ZeRO-3), whole under DDP;
- FSDP's buffers: the gathered (bf16 under bf16-mixed) weights of the root unit and of two blocks (the one running
  and the one prefetched), and one block's unsharded gradients with their fp32 copy for the reduce-scatter; DDP's
  (on more than one rank): its gradient buckets, a second fp32 copy of the gradients;
- activations: what the blocks keep for backward under runtime.activation_checkpointing (none, full, selective;
  each term counted from the ops that save it, checked against a CPU measurement in tests/test_memory_estimate.py),
  the working set of the block whose backward runs, or the head and loss at the start of backward, whichever is
  larger. Fused attention (SDPA/flash) stores no T x T score matrix; on a CPU, attention with dropout runs SDPA's
  math path, which does, and the heap holds more than the tensors' bytes (activation_bytes, measured by
  scripts/bench_train_memory.py: docs/benchmarks.md "Memory of a CPU run").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from gptlab.config.fsdp_keys import is_fsdp
from gptlab.config.schemas import Runtime
from gptlab.execution.peak_flops import lookup
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters, training_flops_per_token
from gptlab.model.sparse_attention import computes_densely

# The GPUs a plan is priced on: dense bf16 peak and memory from the one peak table MFU uses (execution/peak_flops.py).
GPUS = {kind: {"peak_flops": lookup(f"NVIDIA {kind}").bf16, "memory_bytes": lookup(f"NVIDIA {kind}").memory_bytes}
        for kind in ("A100", "H100", "H200")}
GB = 1e9
PROCESS_OVERHEAD_BYTES = 0.6 * GB  # the Python + torch + Lightning runtime of one process, measured ~0.5-0.6 GB
# fp32 weights, fp32 grads and Adam's two fp32 moments: 16 bytes a parameter, also under mixed precision
# (Lightning keeps fp32 master weights and autocasts the matmuls).
STATE_BYTES_PER_PARAM = 16
# DDP's gradient buckets: a second fp32 copy of the gradients, which all-reduce sends (Lightning's DDP leaves
# gradient_as_bucket_view off); measured on CPU as a 2-rank run's peak less a 1-rank run's (docs/benchmarks.md).
DDP_BUCKET_BYTES_PER_PARAM = 4
# A CPU run's activations as the process's peak RSS holds them: glibc's heap keeps freed blocks for reuse, ~1.2x the
# tensors' bytes (nano at micro-batch 32 and 128, GPT-2 small at 2 and 8; docs/benchmarks.md).
CPU_HEAP_FACTOR = 1.2
MATH_ATTENTION_BYTES = 15  # bytes per layer, head, query and key of CPU attention with dropout (3.75 fp32 copies)


@dataclass
class Plan:
    parameters: int
    flops_per_token: int
    tokens: float
    total_flops: float
    gpus: int
    block_size: int
    micro_batch: int
    ddp: dict[str, Any]  # bytes per GPU by part (estimate_memory's), at the run's micro-batch and precision
    fsdp: dict[str, Any]
    days: dict[str, float]  # by GPU kind, at the given MFU
    fits: dict[tuple[str, str], Optional[Fit]]  # (GPU kind, "DDP" | "FSDP") -> the setting that fits (None: none)


def dtype_bytes(precision: Any) -> tuple[int, int]:
    """(bytes of a matmul activation, bytes of the residual stream) under a trainer.precision: bf16/fp16 autocast
    runs the matmuls in 2 bytes and keeps the residual stream (and the norms) in fp32; *-true runs all in its dtype."""
    text = str(precision or "32-true")
    if text.endswith("-mixed"):
        return 2, 4
    return (2, 2) if text.startswith(("bf16", "16")) else (4, 4)


def block_bytes_per_token(cfg: GPTConfig, mode: str, precision: Any) -> dict[str, float]:
    """Bytes per token one block keeps for backward under checkpointing `mode` ("kept"), and the bytes its own
    backward adds while it runs ("working"), for the pre-LN GPT block (attention, then an MLP of two layers).
    With a = matmul bytes, r = residual bytes, q = H·D_K, v = H·D_V, f = the first MLP layer's width (d_ff, 2·d_ff
    when gated):
      none:      2D·r (the two norms' inputs) + 2D·a (their outputs, the matmuls' inputs) + (2q+v)·a (Q, K, V)
                 + v·a (attention output) + (f + d_ff)·a (the first MLP layer's output and the activation's)
                 + 2D (dropout masks, one byte each, when model.dropout > 0) + fp32 norm statistics and logsumexp;
      selective: D·r (the block's input) + the outputs of its matmuls and of its attention kernel: (2q+v)·a + v·a
                 + D·a (attention projection) + f·a + D·a (second MLP layer) + fp32 logsumexp;
      full:      D·r (the block's input).
    working = what backward recomputes (none's bytes less what the mode kept besides the input) + the gradients in
    flight (2D·r for the residual stream, f·a for the MLP's hidden layer)."""
    a, r = dtype_bytes(precision)
    D, q, v = cfg.n_embd, cfg.n_head * cfg.head_dim, cfg.n_head * cfg.v_head_dim
    first = cfg.d_ff * (2 if cfg.gated else 1)  # a gated MLP's first layer is twice as wide: [A ‖ B]
    stats = 4 * cfg.n_head + 2 * 2 * 4  # attention's logsumexp per head; each norm's mean and 1/std, fp32
    masks = 2 * D if cfg.dropout > 0 else 0
    none = 2 * D * r + 2 * D * a + (2 * q + v) * a + v * a + (first + cfg.d_ff) * a + masks + stats
    kept = {"none": none,
            "selective": D * r + (2 * q + v) * a + v * a + D * a + first * a + D * a + 4 * cfg.n_head,
            "full": D * r}[mode]
    recomputed = 0 if mode == "none" else none - (kept - D * r)
    return {"kept": float(kept), "working": float(recomputed + 2 * D * r + first * a)}


def head_bytes_per_token(cfg: GPTConfig, precision: Any, compiled_loss: bool) -> float:
    """Bytes per token of the head and loss at the start of backward. Eager: the fp32 log-softmax it saved, the
    gradient flowing into it and the logits' fp32 gradient (3 fp32 copies of the V logits), plus the final norm's
    input and output. Compiled (runtime.compile, either scope): the logits in the matmul dtype and their gradient;
    the fp32 copies are never held (GPT-2 small on an H200 agrees: docs/fsdp.md)."""
    a, r = dtype_bytes(precision)
    per_logit = 2 * a if compiled_loss else 3 * 4
    return cfg.padded_vocab_size * per_logit + cfg.n_embd * (r + a)


def math_attention_bytes(cfg: GPTConfig, micro_batch: int, mode: str) -> float:
    """What attention with dropout keeps on a CPU, which no fused kernel computes there (SDPA's math path): per layer,
    head, query and key MATH_ATTENTION_BYTES (the fp32 probabilities, the dropout mask, the dropped probabilities;
    measured, docs/benchmarks.md "Memory of a CPU run"), over the keys a query sees (all T for a dense layer, its band
    for a local one). Every layer keeps them, or under full checkpointing the one being recomputed."""
    if cfg.dropout == 0:
        return 0.0
    T = cfg.block_size
    keys = [T if computes_densely(kind, T, cfg.attn_window) else min(T, 2 * cfg.attn_window)
            for kind in (cfg.attn_pattern[i % len(cfg.attn_pattern)] for i in range(cfg.n_layer))]
    kept = max(keys) if mode == "full" else sum(keys)
    return float(MATH_ATTENTION_BYTES * micro_batch * cfg.n_head * T * kept)


def activation_bytes(cfg: GPTConfig, micro_batch: int, mode: str = "none", precision: Any = "bf16-mixed",
                     compiled: bool = False, cpu: bool = False) -> float:
    """Peak bytes of activations per process for one micro-batch of full-length sequences: every block's kept bytes,
    plus the larger of the working block and the head (they are not alive at once: the head's gradients are freed
    before the last block's backward starts). `compiled`: runtime.compile on (either scope): inductor's partitioner
    keeps the matmul and attention outputs and recomputes the elementwise ops in backward, so a compiled block
    without checkpointing keeps what a selective one keeps (GPT-2 small on an H200: docs/fsdp.md). `cpu`: a CPU
    run's, whose heap holds CPU_HEAP_FACTOR of the tensors' bytes and whose attention with dropout keeps its score
    matrices (math_attention_bytes)."""
    tokens = micro_batch * cfg.block_size
    block = block_bytes_per_token(cfg, "selective" if compiled and mode == "none" else mode, precision)
    head = head_bytes_per_token(cfg, precision, compiled)
    kept = tokens * (cfg.n_layer * block["kept"] + max(head, block["working"]))
    return kept * CPU_HEAP_FACTOR + math_attention_bytes(cfg, micro_batch, mode) if cpu else kept


def fsdp_buffer_bytes(cfg: GPTConfig, precision: Any) -> float:
    """FSDP2's unsharded buffers on each rank (also on one rank): the root unit's gathered weights (embeddings, final
    norm; kept through backward), two blocks' gathered weights (the running one and the prefetched one) and one
    block's unsharded gradients with the fp32 copy reduce-scatter sends."""
    counts = count_parameters(cfg)
    block = (counts["attention"] + counts["mlp"] + counts["norm"]) / cfg.n_layer
    root = counts["total"] - block * cfg.n_layer
    a, _ = dtype_bytes(precision)
    return (root + 2 * block) * a + block * (a + 4)


@dataclass
class MemoryEstimate:
    parameters: int
    states: float  # weights, gradients and optimizer states held by one process
    buffers: float  # FSDP's gathered weights and unsharded gradients, or DDP's gradient buckets (0 on one device)
    activations: float  # kept for backward, for one micro-batch, at the peak
    processes: int  # processes sharing the memory compared against (CPU: all ranks of the node; GPU: 1)
    sharded_over: int
    checkpointing: str  # the mode the activations are counted for (runtime.activation_checkpointing resolved)
    runtime: float = PROCESS_OVERHEAD_BYTES  # the process's own: Python, torch, Lightning
    fsdp: bool = False  # the buffers are FSDP's (else DDP's)

    @property
    def per_process(self) -> float:
        return self.states + self.buffers + self.activations + self.runtime

    @property
    def total(self) -> float:
        return self.per_process * self.processes


def estimate_memory(model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any, accelerator: str,
                    runtime: Optional[Runtime] = None, parameters: Optional[int] = None) -> MemoryEstimate:
    """The memory of this run: per process, and how many processes share one memory (train's check, the planner).
    `runtime`: the run's (checkpointing and compile change the activations); None = Runtime's defaults, eager.
    `parameters`: the model's count when the caller has it already (count_parameters)."""
    runtime = runtime or Runtime(compile=False)
    devices = trainer_cfg.get("devices", 1)
    devices = 1 if devices == "auto" else int(devices)
    world = devices * int(trainer_cfg.get("num_nodes", 1))
    fsdp = is_fsdp(trainer_cfg.get("strategy"))
    precision = trainer_cfg.get("precision", "32-true")
    mode = runtime.checkpointing(sharded=fsdp)
    compiled = runtime.compiled_scope(sharded=fsdp) is not None
    n_params = count_parameters(model_cfg)["total"] if parameters is None else parameters
    buffers = fsdp_buffer_bytes(model_cfg, precision) if fsdp else \
        DDP_BUCKET_BYTES_PER_PARAM * n_params if world > 1 else 0.0
    return MemoryEstimate(
        parameters=n_params,
        states=STATE_BYTES_PER_PARAM * n_params / (world if fsdp else 1),
        buffers=buffers,
        activations=activation_bytes(model_cfg, micro_batch, mode, precision, compiled, cpu=accelerator == "cpu"),
        processes=devices if accelerator == "cpu" else 1,
        sharded_over=world if fsdp else 1,
        checkpointing=mode,
        fsdp=fsdp,
    )


CHECKPOINTING_VALUES = {"none": False, "selective": "selective", "full": True}  # mode -> activation_checkpointing


def _per_gpu(model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any, runtime: Runtime) -> dict[str, Any]:
    """estimate_memory's bytes on one GPU: as the run is configured ("total", its mode marked) and under each
    activation checkpointing mode ("total_<mode>")."""
    own = estimate_memory(model_cfg, micro_batch, trainer_cfg, "gpu", runtime)
    row: dict[str, Any] = {"states": own.states, "buffers": own.buffers, "runtime": PROCESS_OVERHEAD_BYTES,
                           "total": own.per_process, "mode": own.checkpointing}
    for mode, value in CHECKPOINTING_VALUES.items():
        est = estimate_memory(model_cfg, micro_batch, trainer_cfg, "gpu",
                              replace(runtime, activation_checkpointing=value))
        row[f"activations_{mode}"], row[f"total_{mode}"] = est.activations, est.per_process
    return row


@dataclass(frozen=True)
class Fit:
    """A setting under which a run fits on one GPU: its micro-batch (a divisor of the run's, so that accumulating
    `accumulate` of them keeps the global batch) and activation checkpointing mode, and the bytes it needs."""
    micro_batch: int
    accumulate: int
    mode: str
    need: float


def fitting_setting(cfg: GPTConfig, micro_batch: int, trainer_cfg: Any, runtime: Runtime,
                    capacity: float) -> Optional[Fit]:
    """The largest divisor of `micro_batch` that fits in `capacity` under any checkpointing mode, the mode that
    recomputes least on a tie (none, selective, full); None when not even micro-batch 1 with full checkpointing
    does (the states or FSDP's buffers alone are too large: more GPUs to shard over)."""
    best: Optional[Fit] = None
    divisors = [b for b in range(micro_batch, 0, -1) if micro_batch % b == 0]
    for mode, value in CHECKPOINTING_VALUES.items():
        run = replace(runtime, activation_checkpointing=value)
        for size in divisors:
            need = estimate_memory(cfg, size, trainer_cfg, "gpu", run).per_process
            if need <= capacity:
                if best is None or size > best.micro_batch:
                    best = Fit(size, micro_batch // size, mode, need)
                break
    return best


def make_plan(cfg: GPTConfig, tokens: float, gpus: int, micro_batch: int = 1, mfu: float = 0.4,
              trainer_cfg: Optional[dict[str, Any]] = None, runtime: Optional[Runtime] = None) -> Plan:
    """`trainer_cfg`: the run's trainer (devices, nodes, precision, strategy; default bf16 DDP on `gpus` GPUs); the
    plan gives its memory under its own strategy and under the other one (DDP or FSDP over all its GPUs).
    `runtime`: the run's (default: a GPU run's, compiled)."""
    n_params = count_parameters(cfg)["total"]
    flops_per_token = training_flops_per_token(cfg)["total"]
    total = flops_per_token * tokens
    trainer = dict(trainer_cfg or {"devices": gpus, "num_nodes": 1, "precision": "bf16-mixed"})
    runtime = runtime or Runtime(compile=True)
    layouts = {"DDP": trainer if not is_fsdp(trainer.get("strategy")) else {**trainer, "strategy": "ddp"},
               "FSDP": trainer if is_fsdp(trainer.get("strategy")) else {**trainer, "strategy": {"_target_": "fsdp"}}}
    return Plan(
        parameters=n_params,
        flops_per_token=flops_per_token,
        tokens=tokens,
        total_flops=total,
        gpus=gpus,
        block_size=cfg.block_size,
        micro_batch=micro_batch,
        ddp=_per_gpu(cfg, micro_batch, layouts["DDP"], runtime),
        fsdp=_per_gpu(cfg, micro_batch, layouts["FSDP"], runtime),
        days={kind: total / (gpus * spec["peak_flops"] * mfu) / 86400 for kind, spec in GPUS.items()},
        fits={(kind, label): fitting_setting(cfg, micro_batch, layout, runtime, spec["memory_bytes"])
              for kind, spec in GPUS.items() for label, layout in layouts.items()},
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
    for part in ("states", "buffers", "activations_none", "activations_selective", "activations_full", "runtime",
                 "total_none", "total_selective", "total_full"):
        label = part.replace("_", " (", 1) + ")" if part.startswith(("activations_", "total_")) else part
        marks = ["*" if part.endswith("_" + mem["mode"]) else " " for mem in (plan.ddp, plan.fsdp)]
        lines.append(f"{label:<28}{_gb(plan.ddp[part]) + marks[0]:>18}{_gb(plan.fsdp[part]) + marks[1]:>22}")
    lines.append("(* runtime.activation_checkpointing as the run sets it: null = selective under FSDP, none "
                 "otherwise; total is the row the run needs)")
    lines.append("")
    for kind, spec in GPUS.items():
        verdicts = [verdict(label, mem, plan.fits[(kind, label)], plan.micro_batch, spec["memory_bytes"])
                    for label, mem in (("DDP", plan.ddp), ("FSDP", plan.fsdp))]
        lines.append(
            f"{kind} ({spec['memory_bytes'] / 1e9:.0f} GB, {spec['peak_flops'] / 1e12:.0f} TFLOP/s bf16): "
            f"{duration(plan.days[kind])} on {plan.gpus} GPU(s) at {mfu:.0%} MFU; {'; '.join(verdicts)}"
        )
    return "\n".join(lines)


def verdict(label: str, mem: dict[str, Any], fit: Optional[Fit], micro_batch: int, capacity: float) -> str:
    """Whether the run fits as configured; else the micro-batch, accumulation and checkpointing that make it fit
    with the same global batch, or why none does."""
    if mem["total"] <= capacity:
        return f"{label} fits ({mem['total'] / 1e9:,.1f} GB)"
    if fit is None:
        held = f"the states take {mem['states'] / 1e9:,.1f} GB" + (
            f" and {label}'s buffers {mem['buffers'] / 1e9:,.1f} GB" if mem["buffers"] else "")
        way = "shard over more GPUs" if label == "FSDP" else "shard the states with trainer=fsdp"
        return (f"{label} does not fit ({mem['total'] / 1e9:,.1f} GB), not even at data.batch_size=1 with full "
                f"activation checkpointing: {held} of each GPU; {way}, or a smaller model")
    how = f"data.batch_size={fit.micro_batch} runtime.activation_checkpointing=" \
          f"{str(CHECKPOINTING_VALUES[fit.mode]).lower()}"
    if fit.accumulate > 1:
        how += f", accumulating {fit.accumulate}x as many micro-batches (the same global batch)"
    return f"{label} does not fit as configured ({mem['total'] / 1e9:,.1f} GB) but fits with {how} " \
           f"({fit.need / 1e9:,.1f} GB)"
