"""Local (banded) vs dense causal attention on CPU: forward+backward time and peak memory.

    python scripts/bench_attention.py [--lengths 1024 2048 4096 8192] [--window 256] [--repeats 3]
    python scripts/bench_attention.py --device cuda   # every kernel and whole models on a GPU (~2 min on an H100)

With --device: every kernel (dense SDPA causal, flex local/strided, chunked local/strided, flash-attn's window where
installed) at --T, fwd+bwd ms eager and compiled, ratio to dense, FLOPs bound and difference to the masked-SDPA
reference; then a training step of GPT-3 Small's shape at --model-T for all-dense, all-local and [dense, local]
(gptlab.tools.benchmarks.attention_speed). Imports only torch and gptlab.model. The rest of this text is the CPU mode.

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

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import argparse
import time

from gptlab.fields import must
from gptlab.launch.arguments import Arg, ArgumentParser, device, non_negative_int, positive_int
from gptlab.launch.cli import user_errors_exit


def heads_width(field: str, value: object) -> None:
    must(lambda v: isinstance(v, int) and v >= 64 and v % 64 == 0, "a multiple of 64 (64 per head), e.g. 768",
         number=True)(field, value)


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--window", type=positive_int, default=256, help="band width w (GPT-Neo's 256)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed forward+backward runs per case")
    parser.add_argument("--kinds", nargs="+", default=["local", "strided"], choices=["local", "strided"],
                        help="sparse kinds to compare")
    parser.add_argument("--threads", type=non_negative_int, default=0,
                        help="torch threads; 0 = torch's default (all cores)")
    parser.add_argument("--layer-lengths", type=positive_int, nargs="*", default=[8192],
                        help="T for the whole-layer rows")
    gpu = parser.add_argument_group("--device mode (the GPU table)")
    gpu.add_argument("--device", type=device, default=None,
                     help="cuda | cpu: the kernel table and whole-model steps there")
    gpu.add_argument("--T", type=positive_int, default=8192, help="sequence length of the kernel rows")
    gpu.add_argument("--batch", type=positive_int, default=1, help="batch of the kernel rows")
    gpu.add_argument("--heads", type=positive_int, default=12, help="heads of the kernel rows (D_K = 64)")
    gpu.add_argument("--model-T", type=positive_int, default=None,
                     help="sequence length of the model rows (default --T)")
    gpu.add_argument("--model-batch", type=positive_int, default=2, help="batch of the model rows")
    gpu.add_argument("--model-layers", type=positive_int, default=12, help="layers of the model rows (GPT-3 Small: 12)")
    gpu.add_argument("--model-width", type=Arg(int, heads_width), default=768,
                     help="n_embd of the model rows (64 per head)")
    gpu.add_argument("--model-vocab", type=positive_int, default=50257,
                     help="vocabulary of the model rows (GPT-2's BPE)")
    gpu.add_argument("--no-compile", action="store_true", help="skip torch.compile (the compiled column, and "
                        "per-block compile of the models)")
    gpu.add_argument("--parts", nargs="+", default=["kernels", "model"], choices=["kernels", "model"])
    args = parser.parse_args()
    if args.device:
        return on_device(args)
    import torch

    from gptlab.tools.benchmarks.attention import Case, measure


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


def on_device(args: argparse.Namespace) -> None:
    import torch

    from gptlab.tools.benchmarks.attention_speed import KERNEL_HEADER, Shape, format_row, kernel_rows, model_rows

    start = time.perf_counter()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    repeats = args.repeats if args.repeats != 3 or device.type == "cpu" else 20
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}; repeats {repeats}, compile {not args.no_compile}")
    if "kernels" in args.parts:
        shape = Shape(T=args.T, window=args.window, B=args.batch, H=args.heads, D=64, dtype=dtype)
        print(f"\nattention fwd+bwd, T={shape.T} w={shape.window} B={shape.B} H={shape.H} D_K=64 "
              f"{str(dtype).removeprefix('torch.')}")
        print(KERNEL_HEADER, flush=True)
        dense = []

        def report(row) -> None:  # type: ignore[no-untyped-def]
            dense.extend([row] if row.kind == "dense" else [])
            print(format_row(row, dense[0], dtype), flush=True)

        kernel_rows(shape, device, repeats, not args.no_compile, report)
    if "model" in args.parts:
        T = args.model_T or args.T
        shape = dict(n_layer=args.model_layers, n_embd=args.model_width, n_head=args.model_width // 64,
                     vocab_size=args.model_vocab)
        print(f"\nGPT-3 Small shape ({args.model_layers} layers, D={args.model_width}), T={T} B={args.model_batch} "
              f"w={args.window}, {'bf16 autocast, ' if device.type == 'cuda' else ''}AdamW, "
              f"{'each block compiled' if not args.no_compile else 'eager'}, attn_impl=auto")
        print(f"{'layers':<16} {'ms/step':>9} {'tokens/s':>11} {'vs dense':>9} {'FLOPs bound':>11}", flush=True)

        def report_model(label: str, ms: float, ratio: float, bound: float) -> None:
            tokens = args.model_batch * T / (ms / 1e3)
            print(f"{label:<16} {ms:>9.1f} {tokens:>11,.0f} {ratio:>8.2f}x {bound:>10.2f}x", flush=True)

        model_rows(T, args.window, args.model_batch, device, repeats, not args.no_compile, shape, report_model,
                   lambda label, why: print(f"{label:<16} {why}", flush=True))
    print(f"\nbench took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
