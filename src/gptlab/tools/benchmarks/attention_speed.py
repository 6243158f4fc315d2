"""Local and strided attention against dense on one device: each kernel's fwd+bwd time beside its FLOPs bound, then
whole GPT-3-Small-shaped models (all dense, all local, GPT-3's [dense, local]) timed per training step.

What `scripts/bench_attention.py --device cuda` prints (issue 31: local >= 5x dense and strided >= 2x at T=8192,
w=256; all-local >= 1.8x and [dense, local] >= 1.3x for the whole model). It imports only torch and gptlab.model,
so it runs on a bare GPU box. Times are throughput: `repeats` fwd+bwd calls queued back to back, then one sync,
divided by `repeats` (best of three such rounds), after warm-up calls that compile. On CUDA the eager kernels are
also timed by the profiler's sum of GPU kernel time ("GPU-busy"): at B=1 a local kernel's GPU work is a fraction of
a millisecond, and an eager call's CPU side (dispatch, launches, flex's guards) can take longer than that.
Each kernel's outputs and q/k/v gradients are compared with the masked-SDPA reference in the same dtype
(`relative_error`: max |diff| / max |ref| over the four, a ~0 reference judged against the computation's scale).
The FLOPs bound is dense causal pairs / the kernel's pairs (`pattern_pairs`): the speedup if every kernel ran at
the same FLOP rate. A model's bound adds the matmuls every variant shares (6 x matmul parameters per token).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from gptlab.model import GPT, GPTConfig
from gptlab.model.sparse_attention import (
    attend,
    chunked_local,
    flash_available,
    flex_available,
    flex_block_mask,
    local_block_pairs,
    pattern_pairs,
)

Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# relative_error that counts as equal, by dtype (bf16 rounds at ~4e-3 of each value)
EQUAL_RTOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}
# A tensor whose largest reference value is below this share of the whole computation's is judged against that share
ZERO_SCALE = 0.1


def relative_error(got: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """Over the tensors (an output, then its gradients), the largest max |diff| / max |ref|, where a tensor whose
    reference is ~0 is judged against ZERO_SCALE x the largest reference value of them all: its rounding noise
    comes from the values it was computed from, not from its own size (at w >= T a strided layer attends to the
    diagonal only; the true q and k gradients are 0, and any kernel's are ~1e-6 of noise)."""
    got, reference = [t.detach().float() for t in got], [t.detach().float() for t in reference]
    scale = max(float(b.abs().max()) for b in reference)
    return max(float((a - b).abs().max()) / max(float(b.abs().max()), ZERO_SCALE * scale, 1e-12)
               for a, b in zip(got, reference))


@dataclass
class Shape:
    T: int = 8192
    window: int = 256
    B: int = 1
    H: int = 12
    D: int = 64
    dtype: torch.dtype = torch.bfloat16


@dataclass
class Row:
    name: str
    kind: str
    ms: Optional[float] = None  # None: skipped (see note)
    gpu_ms: Optional[float] = None  # kernel time alone (the profiler's sum over the GPU's kernels), eager
    compiled_ms: Optional[float] = None
    diff: Optional[float] = None
    note: str = ""
    bound: float = 1.0
    extra: dict = field(default_factory=dict)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_ms(step: Callable[[], object], repeats: int, device: torch.device, warmup: int = 2) -> float:
    """ms per call: `repeats` calls queued, one sync, best of three rounds, after `warmup` calls."""
    for _ in range(warmup):
        step()
    _sync(device)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        _sync(device)
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e3


def gpu_busy_ms(step: Callable[[], object], repeats: int, device: torch.device) -> Optional[float]:
    """ms of GPU kernels per call (CUDA only): the kernels' own time, without the CPU's launch and dispatch time
    that an eager call of a small kernel adds (and that a compiled model mostly hides). None where unavailable."""
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:  # a profiler that fails costs this column only
        step()
        _sync(device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                step()
            _sync(device)
        # The kernels' own rows (device type CUDA), as the profiler's table sums its "Self CUDA" column.
        total_us = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type == DeviceType.CUDA)
    except Exception:  # noqa: BLE001
        return None
    return total_us / 1e3 / repeats if total_us else None


def kernels(shape: Shape, device: torch.device) -> list[tuple[str, str, Optional[Kernel], str]]:
    """(name, kind, fn or None, why skipped) for every kernel that computes local or strided attention here."""
    w = shape.window
    rows: list[tuple[str, str, Optional[Kernel], str]] = [
        ("dense SDPA causal", "dense", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), ""),
    ]
    for kind in ("local", "strided"):
        if device.type == "cuda" and flex_available():
            rows.append((f"flex {kind}", kind, lambda q, k, v, kind=kind: attend(q, k, v, kind, w, "flex"), ""))
        else:
            why = "FlexAttention has no CPU backward" if device.type == "cpu" else "FlexAttention not importable"
            rows.append((f"flex {kind}", kind, None, why))
    cuda = device.type == "cuda"
    for c in (w // 2, w):  # query blocks of w/2 (1.5x the band's scores, more key copies) or w (2x, fewer)
        default = c == (w if cuda else max(1, w // 2))
        name = f"chunked local c={c}" + (f" ({'CUDA' if cuda else 'CPU'} default)" if default else "")
        rows.append((name, "local", lambda q, k, v, c=c: chunked_local(q, k, v, w, None, 0.0, query_block=c), ""))
    rows.append(("chunked local pairs", "local",
                 lambda q, k, v: local_block_pairs(q, k, v, w, None, 0.0), ""))
    rows.append(("chunked strided", "strided", lambda q, k, v: attend(q, k, v, "strided", w, "chunked"), ""))
    if device.type == "cuda" and flash_available() and shape.dtype in (torch.bfloat16, torch.float16):
        rows.append(("flash-attn window", "local", lambda q, k, v: attend(q, k, v, "local", w, "flash"), ""))
    else:
        rows.append(("flash-attn window", "local", None, "flash-attn not installed (pip install flash-attn)"
                     if device.type == "cuda" else "flash-attn is CUDA only"))
    return rows


def _fwd_bwd(fn: Kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    out = fn(q, k, v)
    return [out, *torch.autograd.grad(out, (q, k, v), grad)]


def kernel_rows(shape: Shape, device: torch.device, repeats: int, compile: bool,
                report: Callable[[Row], None] = lambda row: None) -> list[Row]:
    """Every kernel's fwd+bwd ms (eager, and compiled with torch.compile when `compile`), its difference to the
    masked SDPA reference and its FLOPs bound; `report` is called with each row as soon as it is measured."""
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v, grad = (torch.randn(shape.B, shape.H, shape.T, shape.D, device=device, dtype=shape.dtype, generator=gen)
                     for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    references = {kind: [t.float() for t in _fwd_bwd(lambda *x, kind=kind: attend(*x, kind, shape.window, "sdpa"),
                                                      q, k, v, grad)] for kind in ("dense", "local", "strided")}
    dense_pairs = pattern_pairs("dense", shape.T, shape.window)
    rows = []
    for name, kind, fn, why in kernels(shape, device):
        row = Row(name, kind, note=why, bound=dense_pairs / pattern_pairs(kind, shape.T, shape.window))
        if fn is not None:
            try:  # one failing kernel must not hide the others' rows: this runs where nobody can debug it
                got = _fwd_bwd(fn, q, k, v, grad)
                row.diff = relative_error(got, references[kind])
                del got
                row.ms = timed_ms(lambda fn=fn: _fwd_bwd(fn, q, k, v, grad), repeats, device)
                row.gpu_ms = gpu_busy_ms(lambda fn=fn: _fwd_bwd(fn, q, k, v, grad), repeats, device)
                if compile and not name.startswith("flex"):  # flex is always compiled
                    compiled = torch.compile(fn, dynamic=False)
                    row.compiled_ms = timed_ms(lambda c=compiled: _fwd_bwd(c, q, k, v, grad), repeats, device)
            except Exception as error:  # noqa: BLE001 - reported in the row
                row.note = f"FAILED {type(error).__name__}: {str(error)[:300]}"
        rows.append(row)
        report(row)
    return rows


KERNEL_HEADER = (f"{'kernel':<32} {'eager ms':>9} {'vs dense':>9} {'GPU-busy ms':>12} {'vs dense':>9} "
                 f"{'compiled ms':>12} {'vs dense':>9} {'FLOPs bound':>11} {'|diff|/|ref|':>12}")


def format_row(row: Row, dense: Row, dtype: torch.dtype) -> str:
    """One line of the kernel table; ratios are dense's time over the row's, each in its own mode."""
    if row.ms is None:
        return f"{row.name:<32} skipped: {row.note}"

    def ratio(a: Optional[float], b: Optional[float]) -> str:
        return f"{a / b:.2f}x" if a and b else "-"

    def ms(value: Optional[float]) -> str:
        return f"{value:.3f}" if value else "-"

    equal = "" if row.diff is not None and row.diff <= EQUAL_RTOL[dtype] else "  NOT EQUAL"
    return (f"{row.name:<32} {row.ms:>9.3f} {ratio(dense.ms, row.ms):>9} {ms(row.gpu_ms):>12} "
            f"{ratio(dense.gpu_ms, row.gpu_ms):>9} {ms(row.compiled_ms):>12} "
            f"{ratio(dense.compiled_ms, row.compiled_ms):>9} {row.bound:>10.2f}x {row.diff:>12.1e}{equal}"
            + (f"  {row.note}" if row.note else ""))


# GPT-3 Small's shape (docs/presets.md): 12 layers, D=768, H=12, D_K=64; the sequence is the benchmark's T.
GPT3_SMALL = dict(vocab_size=50257, pad_vocab_to=64, n_layer=12, n_head=12, n_embd=768, dropout=0.0)
PATTERNS = {"all dense": ["dense"], "all local": ["local"], "[dense, local]": ["dense", "local"]}


def model_flops(cfg: GPTConfig, model: torch.nn.Module, batch: int) -> float:
    """fwd+bwd FLOPs of one step, counting causal pairs: 6 per matmul weight per token (every Linear, the head
    included) plus 12 H D_K per allowed (query, key) pair of each layer (QK^T and AV, forward and backward)."""
    tokens = batch * cfg.block_size
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = sum(12 * cfg.n_head * cfg.head_dim * pattern_pairs(cfg.layer_kind(layer), cfg.block_size,
                                                                   cfg.attn_window)
                    for layer in range(cfg.n_layer))
    return 6 * matmul * tokens + attention * batch


def model_rows(T: int, window: int, batch: int, device: torch.device, repeats: int, compile: bool,
               shape: Optional[dict] = None, report: Callable[[str, float, float, float], None] = lambda *a: None,
               failed: Callable[[str, str], None] = lambda *a: None) -> dict[str, tuple[float, float]]:
    """ms per training step (bf16 autocast on CUDA, AdamW) of each attention pattern, and its FLOPs. Each block is
    compiled on its own when `compile` (blocks of one kind share the compiled code). `report` gets (pattern, ms,
    dense ms / ms, FLOPs bound) as each is measured; `failed` gets (pattern, why) for one that raised."""
    results = {}
    for label, pattern in PATTERNS.items():
        cfg = GPTConfig(**{**GPT3_SMALL, **(shape or {})}, block_size=T, attn_pattern=pattern, attn_window=window)
        try:
            results[label] = _step_ms(cfg, batch, device, repeats, compile)
        except Exception as error:  # noqa: BLE001 - reported, and the other patterns still run
            failed(label, f"FAILED {type(error).__name__}: {str(error)[:300]}")
            continue
        ms, flops = results[label]
        dense_ms, dense_flops = results.get("all dense", (ms, flops))
        report(label, ms, dense_ms / ms, dense_flops / flops)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def _step_ms(cfg: GPTConfig, batch: int, device: torch.device, repeats: int, compile: bool) -> tuple[float, float]:
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    if compile:
        if device.type == "cuda" and flex_available():  # built before tracing, the graphs read it: no recompile
            for kind in set(cfg.attn_pattern) - {"dense"}:
                flex_block_mask(kind, cfg.block_size, cfg.attn_window, device)
        for block in model.blocks:
            block.compile(dynamic=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(x)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        optimizer.step()

    return timed_ms(step, repeats, device, warmup=3), model_flops(cfg, model, batch)
