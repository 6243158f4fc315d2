"""A self-check of this machine for gptlab: what the GPU stack supports, whether the attention kernels agree,
and how fast one real training step runs (scripts/doctor.py prints it).

On a GPU: CUDA/NCCL/bf16, flex vs chunked vs sdpa local attention (equality and fwd+bwd time), one bf16-mixed
train step of gpt2_small eager and compiled (tokens/s, MFU against the GPU's dense bf16 peak), its memory peak
against gptlab.preflight.planning's estimate, float8 training's loss against bf16's over a few hundred steps (GPUs of
compute capability >= 8.9 with torchao), and a 2-rank NCCL DDP step when two GPUs are present. On a CPU the parts
that need a GPU are listed as skipped, with why.
"""

from __future__ import annotations

import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.execution.float8 import apply_float8, check_float8, torchao_available
from gptlab.execution.parallelize import parallelize
from gptlab.execution.peak_flops import device_peak
from gptlab.model import GPT, GPTConfig, next_token_loss, training_flops_per_token
from gptlab.model.sparse_attention import FLASH_DTYPES, attend, flash_available, flex_available
from gptlab.preflight.devices import check_device
from gptlab.preflight.planning import PROCESS_OVERHEAD_BYTES, estimate_memory
from gptlab.tools.benchmarks.attention_speed import EQUAL_RTOL, relative_error, timed_ms
from gptlab.train.optim import adamw, weight_decay_groups

GPT2_SMALL = dict(vocab_size=50257, pad_vocab_to=64, block_size=1024, n_layer=12, n_head=12, n_embd=768)
NANO = dict(vocab_size=257, block_size=256, n_layer=4, n_head=4, n_embd=128)


@dataclass
class Report:
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (check, result, detail)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (check, why)
    failed: bool = False

    def add(self, check: str, result: str, detail: str = "", ok: bool = True) -> None:
        self.rows.append((check, result if ok else f"FAIL {result}", detail))
        self.failed |= not ok

    def skip(self, check: str, why: str) -> None:
        self.skipped.append((check, why))

    def table(self) -> str:
        width = max([len(r[0]) for r in self.rows] + [5])
        rw = max([len(r[1]) for r in self.rows] + [6])
        lines = [f"{'check':<{width}}  {'result':<{rw}}  detail", "-" * (width + rw + 30)]
        lines += [f"{c:<{width}}  {r:<{rw}}  {d}" for c, r, d in self.rows]
        if self.skipped:
            lines += ["", "skipped:"] + [f"  {c}: {why}" for c, why in self.skipped]
        return "\n".join(lines)


def _timed(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    """Best seconds of `repeats` calls after one warm-up call."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def environment(report: Report) -> None:
    cuda = torch.cuda.is_available()
    report.add("torch", torch.__version__, f"{torch.get_num_threads()} CPU threads")
    report.add("CUDA", f"yes, {torch.cuda.device_count()} GPU(s)" if cuda else "no",
               torch.cuda.get_device_name(0) if cuda else "")
    nccl = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    report.add("NCCL", "yes" if nccl else "no", "multi-GPU DDP/FSDP backend")
    if cuda:
        report.add("bf16", "yes" if torch.cuda.is_bf16_supported() else "no", "trainer.precision=bf16-mixed")
    else:
        report.skip("bf16", "no CUDA device (bf16-mixed training is a GPU feature)")
    report.add("FlexAttention", "importable" if flex_available() else "missing", "model.attn_impl=flex")
    report.add("flash-attn", "installed" if flash_available() else "not installed",
               "optional (pip install flash-attn, CUDA): model.attn_impl=flash, auto's first choice for local layers")


def attention(report: Report, device: torch.device, T: int, window: int = 256, repeats: int = 3) -> None:
    """Each kernel's outputs and q/k/v gradients against masked SDPA (the reference), and its fwd+bwd time: calls
    queued back to back (attention_speed.timed_ms), so a GPU's small kernels are not timed as one launch each."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, 12, T, 64, device=device, dtype=dtype, generator=gen).requires_grad_() for _ in range(3))
    grad = torch.randn(1, 12, T, 64, device=device, dtype=dtype, generator=gen)
    dense_s = timed_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad), repeats,
                       device, warmup=1) / 1e3
    report.add(f"attention dense T={T}", f"{dense_s * 1e3:.2f} ms", "causal SDPA fwd+bwd, B=1 H=12 D_K=64")
    impls = ["sdpa", "chunked"] + (["flex"] if device.type == "cuda" and flex_available() else [])
    if "flex" not in impls:
        report.skip("attention flex", "FlexAttention has no CPU backward" if device.type == "cpu" else "not importable")
    flash = device.type == "cuda" and flash_available() and dtype in FLASH_DTYPES
    if not flash:
        report.skip("attention flash", "flash-attn is not installed (optional: pip install flash-attn)"
                    if device.type == "cuda" else "flash-attn is CUDA only")
    for kind in ("local", "strided"):
        outputs = {}
        for impl in impls + (["flash"] if flash and kind == "local" else []):
            def run(impl: str = impl, kind: str = kind) -> torch.Tensor:
                for t in (q, k, v):
                    t.grad = None
                out = attend(q, k, v, kind, window, impl)
                out.backward(grad)
                return out

            seconds = timed_ms(run, repeats, device, warmup=1) / 1e3
            out = run()
            outputs[impl] = [out.detach().float()] + [t.grad.float() for t in (q, k, v)]
            # Relative to each tensor's largest entry (bf16 rounding grows with the values' scale), a ~0 one to the
            # computation's: at w >= T a strided layer's q and k gradients are 0 plus rounding noise.
            diff = relative_error(outputs[impl], outputs["sdpa"])
            ok = diff <= EQUAL_RTOL[dtype]
            report.add(f"attention {kind} {impl} T={T} w={window}", f"{seconds * 1e3:.2f} ms",
                       f"{dense_s / seconds:.2f}x dense; relative error to sdpa {diff:.1e} (outputs, grads)", ok)


def _train_step(cfg: GPTConfig, batch: int, device: torch.device, compile: bool, bf16: bool, repeats: int):
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    loss_fn = parallelize(model, Runtime(compile=compile), device)  # as a training run applies it
    optimizer = adamw(weight_decay_groups(model, 0.1), lr=1e-4, weight_decay=0.1)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(x, x).objective
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    step()  # compiles, allocates the optimizer state
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = _timed(step, repeats, sync)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    loss = float(step())
    return seconds, loss, peak


def train_steps(report: Report, device: torch.device, repeats: int = 3, model: Optional[dict] = None,
                batch: Optional[int] = None) -> None:
    on_gpu = device.type == "cuda"
    values = model or (GPT2_SMALL if on_gpu else NANO)
    batch = batch or (8 if on_gpu else 16)
    cfg = GPTConfig(**values)
    name = "gpt2_small" if values == GPT2_SMALL else f"L{cfg.n_layer} E{cfg.n_embd} T{cfg.block_size}"
    tokens = batch * cfg.block_size
    peak_flops, source = device_peak(device, "bf16-mixed")
    if on_gpu:
        report.add("peak FLOP/s for MFU", f"{peak_flops / 1e12:,.1f} TFLOP/s" if peak_flops else "unknown", source,
                   peak_flops is not None)
    flops = training_flops_per_token(cfg)["total"] * tokens
    modes = [False, True] if on_gpu else [False]
    if not on_gpu:
        report.skip("compiled train step", "not run on CPU here (inductor compiles ~1 min); scripts/bench_train.py "
                    "measures it")
        report.skip("MFU", "no known peak FLOPs for a CPU")
    for compile in modes:
        seconds, loss, peak = _train_step(cfg, batch, device, compile, on_gpu, repeats)
        label = f"train step {name} B={batch} {'bf16-mixed' if on_gpu else 'fp32'}{' compiled' if compile else ''}"
        mfu = f", MFU {flops / seconds / peak_flops:.1%}" if peak_flops else ""
        ok = math.isfinite(loss)
        report.add(label, f"{tokens / seconds:,.0f} tok/s", f"{seconds * 1e3:.0f} ms/step, loss {loss:.3f}{mfu}", ok)
        if peak is not None and not compile:
            est = estimate_memory(cfg, batch, {"precision": "bf16-mixed"}, "gpu", Runtime(compile=False))
            planned = est.per_process - PROCESS_OVERHEAD_BYTES  # the allocator's peak leaves out the CUDA context
            report.add("memory peak vs planner", f"{peak / 2**30:.2f} GiB",
                       f"planner {planned / 2**30:.2f} GiB ({peak / planned:.2f}x; eager, bf16-mixed)")
    if not on_gpu:
        report.skip("memory peak vs planner", "CPU memory has no allocator peak counter")


# float8 vs bf16: a small model whose Linear dims are all multiples of 16, on a sequence task it can learn
# (arithmetic progressions mod the vocabulary), so the two loss curves fall and can be compared.
FLOAT8_MODEL = dict(vocab_size=512, block_size=256, n_layer=4, n_head=4, n_embd=256, dropout=0.0)
# The final losses (means of the last 20 steps) may differ by this share of the first step's loss: a scale that
# does not shrink as the task is learned (the finals approach 0, where a relative difference means nothing).
FLOAT8_PARITY = 0.02


def float8_loss_curve(cfg: GPTConfig, device: torch.device, steps: int, float8: bool, batch: int = 16):
    """Per-step losses of the model trained from seed 0 on the task's batches (seed 1) in bf16 autocast (CUDA), after
    apply_float8 when `float8`, and the names of the layers float8 took."""
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    converted = apply_float8(model) if float8 else []
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=device).manual_seed(1)
    losses = []
    for _ in range(steps):
        start = torch.randint(0, cfg.vocab_size, (batch, 1), device=device, generator=gen)
        stride = torch.randint(1, 8, (batch, 1), device=device, generator=gen)
        x = (start + stride * torch.arange(cfg.block_size, device=device)) % cfg.vocab_size
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = next_token_loss(model(x), x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()], converted


def float8_loss_curves(cfg: GPTConfig, device: torch.device, steps: int, batch: int = 16):
    """The same model, init and batches in bf16 and in float8: (bf16 losses, float8 losses, float8's layers)."""
    bf16, _ = float8_loss_curve(cfg, device, steps, False, batch)
    float8, converted = float8_loss_curve(cfg, device, steps, True, batch)
    return bf16, float8, converted


def float8_apart(bf16: list[float], float8: list[float]) -> tuple[float, float, float]:
    """(bf16's final loss, float8's, how far apart as a share of the first loss): finals are means of the last 20."""
    final_bf16, final_float8 = (sum(c[-20:]) / len(c[-20:]) for c in (bf16, float8))
    return final_bf16, final_float8, abs(final_float8 - final_bf16) / bf16[0]


def float8_parity(report: Report, device: torch.device, steps: int = 300) -> None:
    """Train the same model from the same init on the same batches in bf16 autocast and with runtime.float8's
    conversion (gptlab.execution.float8.apply_float8): the final losses must agree within FLOAT8_PARITY."""
    check = f"float8 loss parity ({steps} steps)"
    if device.type != "cuda":
        report.skip(check, "no CUDA device (float8 matmuls need a GPU of compute capability >= 8.9)")
        return
    try:
        check_float8(torch.cuda.get_device_capability(device), torchao_available(), torch.cuda.get_device_name(device))
    except ConfigError as refusal:
        report.skip(check, str(refusal))
        return
    bf16, float8, converted = float8_loss_curves(GPTConfig(**FLOAT8_MODEL), device, steps)
    final_bf16, final_float8, apart = float8_apart(bf16, float8)
    ok = math.isfinite(final_float8) and apart <= FLOAT8_PARITY
    report.add(check, f"{final_float8:.4f} vs bf16 {final_bf16:.4f}",
               f"apart by {apart:.2%} of the first loss {bf16[0]:.2f} (limit {FLOAT8_PARITY:.0%}); "
               f"{len(converted)} Linear layers in float8, the head in bf16", ok)


def _ddp_worker(rank: int, port: int, result: torch.multiprocessing.SimpleQueue) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**NANO)).cuda()
    ddp = DistributedDataParallel(model, device_ids=[rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 257, (4, 256), device="cuda", generator=torch.Generator("cuda").manual_seed(rank))
    start = time.perf_counter()
    next_token_loss(ddp(x), x).backward()
    optimizer.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    digest = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    gathered = [torch.zeros_like(digest) for _ in range(2)]
    dist.all_gather(gathered, digest)
    if rank == 0:
        result.put((seconds, [float(g) for g in gathered]))
    dist.destroy_process_group()


def ddp(report: Report) -> None:
    if torch.cuda.device_count() < 2:
        report.skip("2-rank NCCL DDP step", f"needs 2 GPUs, found {torch.cuda.device_count()}")
        return
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    result = ctx.SimpleQueue()
    mp.start_processes(_ddp_worker, args=(port, result), nprocs=2, start_method="spawn")
    seconds, digests = result.get()
    report.add("DDP NCCL 2 ranks", f"{seconds * 1e3:.0f} ms", f"first step; weights equal on both ranks: "
               f"{digests[0] == digests[1]}", digests[0] == digests[1])


def run(device: Optional[str] = None, attention_T: Optional[int] = None, repeats: int = 3,
        float8_steps: int = 300) -> Report:
    report = Report()
    dev = check_device("--device", device or ("cuda" if torch.cuda.is_available() else "cpu"))
    environment(report)
    attention(report, dev, attention_T or (8192 if dev.type == "cuda" else 2048), repeats=repeats)
    train_steps(report, dev, repeats=repeats)
    float8_parity(report, dev, float8_steps)
    if dev.type == "cuda":
        ddp(report)
    else:
        report.skip("2-rank NCCL DDP step", "no CUDA device")
    return report
