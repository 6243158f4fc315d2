"""Local (banded) vs dense causal attention on CPU: forward+backward time and peak memory.

    python scripts/bench_attention.py [--lengths 1024 2048 4096 8192] [--window 256] [--repeats 3]

Each row is one sequence length; local and strided layers are given as ratios to dense causal SDPA
(`scaled_dot_product_attention(is_causal=True)`) measured in the same run. B=1, H=12, D_K=64, fp32, the
kernel `auto` picks. How memory is measured: see gptlab.tools.benchmarks.attention.
The last rows ("layer") time a whole attention layer at --layer-lengths (the QKV projection, head split, kernel,
merge and output projection, D = H * D_K = 768), local vs dense: the speedup a model sees. Their last line times
the layer with the kernel replaced by "return v": the projections alone, which bound any kernel's whole-layer
speedup at dense / projections.
Goals: local >= 5x faster than dense at T=8192 (issue 4), the whole layer >= 8x (issue 14; the bound row shows why
D=768 cannot reach it on a CPU), and local memory growing linearly in T.
"""

from __future__ import annotations

import argparse

import torch

from gptlab.tools.benchmarks.attention import Case, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--window", type=int, default=256, help="band width w (GPT-Neo's 256)")
    parser.add_argument("--repeats", type=int, default=3, help="timed forward+backward runs per case")
    parser.add_argument("--kinds", nargs="+", default=["local", "strided"], help="sparse kinds to compare")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default (all cores)")
    parser.add_argument("--layer-lengths", type=int, nargs="*", default=[8192], help="T for the whole-layer rows")
    args = parser.parse_args()

    threads = args.threads or torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads; B=1 H=12 D_K=64 fp32, w={args.window}")
    header = f"{'T':>6} {'dense ms':>9} {'dense MB':>9}"
    for kind in args.kinds:
        header += f" | {kind + ' kernel':>15} {'ms':>8} {'speedup':>8} {'MB':>8} {'mem/dense':>9}"
    print(header)
    for T in args.lengths:
        dense = measure(Case("dense", T, args.window, repeats=args.repeats, threads=args.threads))
        row = f"{T:>6} {dense.ms:>9.1f} {dense.peak_mb:>9.1f}"
        for kind in args.kinds:
            r = measure(Case(kind, T, args.window, repeats=args.repeats, threads=args.threads))
            speedup, memory = dense.ms / r.ms, r.peak_mb / dense.peak_mb
            row += f" | {r.kernel:>15} {r.ms:>8.1f} {speedup:>7.2f}x {r.peak_mb:>8.1f} {memory:>9.2f}"
        print(row, flush=True)
    for T in args.layer_lengths:
        dense = measure(Case("dense", T, args.window, repeats=args.repeats, threads=args.threads, layer=True))
        row = f"{T:>6} {dense.ms:>9.1f} {dense.peak_mb:>9.1f}"
        for kind in args.kinds:
            r = measure(Case(kind, T, args.window, repeats=args.repeats, threads=args.threads, layer=True))
            speedup, memory = dense.ms / r.ms, r.peak_mb / dense.peak_mb
            row += f" | {r.kernel:>15} {r.ms:>8.1f} {speedup:>7.2f}x {r.peak_mb:>8.1f} {memory:>9.2f}"
        print(row + "   <- whole layer", flush=True)
        free = measure(Case("dense", T, args.window, repeats=args.repeats, threads=args.threads, layer=True,
                            free_attention=True))
        print(f"{T:>6} whole layer with free attention (the projections alone): {free.ms:.1f} ms, so no attention "
              f"kernel can make the layer more than {dense.ms / free.ms:.2f}x faster than dense", flush=True)


if __name__ == "__main__":
    main()
