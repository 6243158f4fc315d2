"""Document masking's cost on CPU: a GPT training step with data.document_masking against the same step without.

    python scripts/bench_document_masking.py [--lengths 256 512 1024] [--patterns dense local] [--repeats 5]

Each row: one forward+backward of a small GPT (B=4, 2 layers, D=256, H=4, w=128 for local layers), best of
--repeats with masked and unmasked steps interleaved; ratio = masked / unmasked. Documents have a mean length of
--doc-len tokens. On CPU masked dense layers use SDPA with an explicit (B, 1, T, T) mask, where the unmasked dense
layer has SDPA's causal kernel; local layers use the kernel `auto` picks either way (the band kernel once T >= 3w,
with "same document" in its block masks when masked).
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from gptlab.launch.arguments import ArgumentParser, non_negative_int, positive_int


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--patterns", nargs="+", default=["dense", "local"], choices=["dense", "local", "strided"])
    parser.add_argument("--pos-embs", nargs="+", default=["learned", "rope", "alibi"],
                        choices=["learned", "rope", "alibi"])
    parser.add_argument("--doc-len", type=positive_int, default=128, help="mean document length in tokens")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed steps of each kind (best is kept)")
    parser.add_argument("--threads", type=non_negative_int, default=0, help="torch threads; 0 = torch's default")
    args = parser.parse_args()
    import torch

    from gptlab.tools.benchmarks.document_masking import MaskingCase, time_steps

    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; B=4, 2 layers, D=256, H=4, fp32, "
          f"mean document {args.doc_len} tokens, best of {args.repeats} interleaved")
    print("| T | layers | positions | unmasked ms | masked ms | masked / unmasked |")
    print("|---:|---|---|---:|---:|---:|")
    for T in args.lengths:
        for pattern in args.patterns:
            for pos_emb in args.pos_embs:
                case = MaskingCase(T=T, pattern=pattern, pos_emb=pos_emb, doc_len=args.doc_len)
                plain, masked = time_steps(case, args.repeats)
                print(f"| {T} | {pattern} | {pos_emb} | {plain:.1f} | {masked:.1f} | {masked / plain:.2f}x |",
                      flush=True)


if __name__ == "__main__":
    main()
