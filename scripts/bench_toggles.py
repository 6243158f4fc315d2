"""Per-step cost of RoPE, ALiBi, QK-norm (and RMSNorm, SwiGLU) vs learned positions, of the speedrun's training-side
choices (an untied head, local/short windows, a seq_lens or batch_sizes stage, optimizer=normuon), of its model-side
choices, and of the probes.

    python scripts/bench_toggles.py [--batch 8] [--repeats 5]

Nano shape (4 layers, D=128, H=4, T=256, byte vocabulary), fp32 on CPU, one full training step (forward, loss,
backward, AdamW). Interleaved, best of N; ratios against the baseline of the same run. Goal (issue 15): RoPE,
ALiBi and QK-norm each <= 1.15x. The speedrun's choices (issue 44) each alone, then model=speedrun_nano's keys all
together, with their layer lists at nano's 4 blocks; mtp_weights adds its two extra cross-entropies to the step's
loss. One attention layer's forward+backward is timed too (many more repeats:
on a loaded machine its best-of-N settles where the whole step's does not). Probes at
callbacks.stability_probes.every_n_steps=N cost (probed - plain)/N of a step, to stay under 2%.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from gptlab.launch.arguments import ArgumentParser, non_negative_int, positive_int
from gptlab.tools.benchmarks.toggle_variants import VARIANTS


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=positive_int, default=8, help="sequences per step")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed steps per variant (best is kept)")
    parser.add_argument("--every", type=positive_int, default=50, help="probe interval to report the amortised cost at")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="NAME",
                        help=f"which of: {', '.join(VARIANTS)} (the baseline is always run)")
    parser.add_argument("--layer-repeats", type=positive_int, default=60,
                        help="timed runs of one attention layer per variant")
    parser.add_argument("--threads", type=non_negative_int, default=0, help="torch threads; 0 = torch's default")
    args = parser.parse_args()
    import torch

    from gptlab.tools.benchmarks.toggles import measure, measure_attention_layer

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; nano shape, batch {args.batch}, fp32")
    names = ["learned (baseline)"] + [v for v in args.variants if v != "learned (baseline)"]
    layer = measure_attention_layer(names, args.batch, args.layer_repeats)
    print(f"{'one attention layer, fwd+bwd':<30}{'ms':>10}{'x baseline':>12}")
    for name, ms in layer.items():
        print(f"{name:<30}{ms:>10.2f}{ms / layer[names[0]]:>12.3f}")
    best = measure(names, args.batch, args.repeats)
    base = best["learned (baseline)"]
    print(f"{'training step':<30}{'ms/step':>10}{'x baseline':>12}")
    for name, ms in best.items():
        print(f"{name:<30}{ms:>10.1f}{ms / base:>12.3f}")
    probe = best["probed step"] - base
    print(f"probes: +{probe:.1f} ms on a probed step = {probe / base:.1%} of a step; "
          f"every {args.every} steps: {probe / base / args.every:.2%} per step")


if __name__ == "__main__":
    main()
