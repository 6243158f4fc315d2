"""Fused sweep members (hydra/launcher=fused) against the same jobs one after another, in one interleaved run:

    python scripts/bench_fused.py                       # nano, k = 1 2 4 8 16, micro-batch 8 (CPU: ~10 min idle)
    python scripts/bench_fused.py --ks 1 8 --batch 32   # the nano default micro-batch
    python scripts/bench_fused.py --device cuda --ks 1 4 16 --batch 32
    python scripts/bench_fused.py --device cuda --model gpt2_small --ks 1 4 --batch 8

Prints tokens/s summed over members for the members alone, fused with torch.func's vmap (what training runs) and as
batched modules (the prototype tools/benchmarks/fused_batched.py), the ratios, the bound (k x the fused step at
k=1), the step's memory (gptlab.tools.benchmarks.fused_speed says what each column counts), and the physics of a
step here: matmul FLOP/s against the step's FLOPs, per-op cost against its op count (CPU only). On a GPU every side
runs under bf16 autocast, as trainer=gpu trains. Goals (issue 42): >= 2.5x at k=8 for nano on a 2-core CPU; on one
GPU >= 8x at k=16 for nano and >= 1.3x at k=4 for gpt2_small at micro-batch 8. scripts/gpu_check.sh's fused_sweep
part runs the GPU rows.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import platform
import time

from gptlab.launch.arguments import ArgumentParser, positive_int
from gptlab.launch.arguments import device as device_arg
from gptlab.tools.benchmarks.fused_shapes import SHAPES


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=positive_int, nargs="+", default=[1, 2, 4, 8, 16], help="group sizes to measure")
    parser.add_argument("--batch", type=positive_int, default=8,
                        help="micro-batch of each member (windows of 256 tokens)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="interleaved timings of each side, each side first in turn; the best is kept")
    parser.add_argument("--device", type=device_arg, default="cpu", help="cpu | cuda")
    parser.add_argument("--model", choices=list(SHAPES), default="nano", help="the members' shape")
    args = parser.parse_args()
    import torch

    from gptlab.tools.benchmarks.fused_speed import measure, physics, table

    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    shape, cuda = SHAPES[args.model], device.type == "cuda"
    print(f"{args.model} (L{shape['n_layer']} H{shape['n_head']} E{shape['n_embd']} T{shape['block_size']}, vocab "
          f"{shape['vocab_size']}), micro-batch {args.batch}, {'bf16 autocast' if cuda else 'fp32'}, AdamW, clip 1.0; "
          f"{where}; torch {torch.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for line in table(measure(sorted(set(args.ks)), args.batch, args.repeats, device, shape, bf16=cuda)):
        print(line, flush=True)
    if not cuda:
        for line in physics(args.batch, args.repeats, device, shape):
            print(line, flush=True)


if __name__ == "__main__":
    main()
