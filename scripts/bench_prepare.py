"""Data preparation throughput: tokens/s per process and scaling efficiency at the given process counts.

Prepares a deterministic generated corpus with each count of worker processes (interleaved rounds, best of N) and
prints a markdown table; efficiency is rate(n) / (n * rate(first count)), measured in the same run.
Usage: python scripts/bench_prepare.py [1 2 8] [--mib 32] [--repeats 3] [--tokenizer gpt2]
(default counts: 1, 2 and all cores; gpt2 needs its ranks in data/cache/tiktoken: scripts/fetch_gpt2_ranks.py)
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import os
from pathlib import Path

from gptlab.launch.arguments import ArgumentParser, positive_int, tokenizer, writable_dir
from gptlab.launch.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=positive_int,
                        help="process counts (data.num_proc); first is the reference")
    parser.add_argument("--mib", type=positive_int, default=32, help="corpus size in MiB of JSONL text")
    parser.add_argument("--repeats", type=positive_int, default=3, help="interleaved rounds; the best of them is kept")
    parser.add_argument("--tokenizer", type=tokenizer, default="gpt2", help="a tiktoken encoding, or bytes")
    parser.add_argument("--dir", type=writable_dir, default=Path("/tmp/gptlab_bench_prepare"), help="corpus and caches")
    args = parser.parse_args()
    from gptlab.tools.benchmarks.prepare import main as run

    counts = args.counts or sorted({1, 2, os.cpu_count() or 1})
    run(counts, args.mib, args.repeats, args.tokenizer, args.dir)


if __name__ == "__main__":
    main()
