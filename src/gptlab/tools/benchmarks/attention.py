"""Forward+backward time and peak memory of one attention layer's kernel, local vs dense causal.

Memory: torch's CPU allocator is plain malloc, invisible to tracemalloc, and the profiler's memory view
has no running peak. So every case runs in a fresh process (multiprocessing "spawn"), which reads its
resident-set high-water mark (getrusage ru_maxrss) before and after one forward+backward: the difference
is the peak memory that step needed (q, k, v and their gradients, which every kernel shares, plus the
kernel's own scores, copies and saved tensors), without the interpreter and torch. Before that, the same
kernel runs once on a short sequence, so lazily loaded code and thread pools are resident before the
baseline is read.
Time is then the best of a few forward+backward repeats in the same process (noise from other processes
only ever adds time).
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
import time
from dataclasses import dataclass

import torch

from gptlab.model.sparse_attention import attend, resolve_impl


@dataclass
class Case:
    kind: str  # dense | local | strided
    T: int
    window: int = 256
    impl: str = "auto"
    B: int = 1
    H: int = 12
    head_dim: int = 64
    repeats: int = 3
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    layer: bool = False  # time a whole attention layer (QKV projection, kernel, output projection) instead
    free_attention: bool = False  # layer only: the kernel replaced by "return v", leaving the projections' cost


@dataclass
class Result:
    kernel: str  # what auto resolved to
    ms: float  # best forward+backward time
    peak_mb: float  # peak extra resident memory of one forward+backward


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _measure(case: Case) -> Result:
    """Runs inside the child process."""
    if case.threads:
        torch.set_num_threads(case.threads)
    kernel = resolve_impl(case.impl, case.kind, case.T, case.window, torch.device("cpu"))
    impl = "auto" if kernel == "dense" else kernel

    if case.layer:
        return _measure_layer(case, kernel, impl)

    def step(T: int) -> float:
        torch.manual_seed(0)
        q, k, v = (torch.randn(case.B, case.H, T, case.head_dim, requires_grad=True) for _ in range(3))
        grad_out = torch.randn(case.B, case.H, T, case.head_dim)
        start = time.perf_counter()
        torch.autograd.backward(attend(q, k, v, case.kind, case.window, impl), grad_out)
        return time.perf_counter() - start

    step(min(case.T, 2 * case.window + 1))  # warm-up: same kernel, short sequence
    before = _peak_rss_mb()
    step(case.T)
    peak_mb = _peak_rss_mb() - before
    best = min(step(case.T) for _ in range(case.repeats))
    return Result(kernel=kernel, ms=1e3 * best, peak_mb=peak_mb)


def _measure_layer(case: Case, kernel: str, impl: str) -> Result:
    """fwd+bwd of one CausalSelfAttention (D = H * D_K) on (B, T, D) activations, best of the repeats."""
    from gptlab.model import GPTConfig
    from gptlab.model.attention import CausalSelfAttention

    torch.manual_seed(0)
    D = case.H * case.head_dim
    cfg = GPTConfig(vocab_size=2, block_size=case.T, n_layer=1, n_head=case.H, n_embd=D, attn_pattern=[case.kind],
                    attn_window=case.window, attn_impl=impl)
    layer = CausalSelfAttention(cfg)
    if case.free_attention:  # what the layer would cost if attention took no time: the bound of any kernel
        layer.attend = lambda q, k, v, *args: v
    x = torch.randn(case.B, case.T, D, requires_grad=True)
    grad_out = torch.randn(case.B, case.T, D)

    def step() -> float:
        start = time.perf_counter()
        torch.autograd.backward(layer(x), grad_out)
        return time.perf_counter() - start

    before = _peak_rss_mb()
    step()
    peak_mb = _peak_rss_mb() - before
    best = min(step() for _ in range(case.repeats))
    return Result(kernel=kernel, ms=1e3 * best, peak_mb=peak_mb)


def measure(case: Case) -> Result:
    """One case in a fresh process, so its memory high-water mark is its own."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_measure, (case,))
