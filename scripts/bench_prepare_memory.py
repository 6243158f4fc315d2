"""Peak memory of data preparation at growing corpus sizes: flat means bounded by settings, not by the corpus.

Generates deterministic JSONL corpora of the given sizes under --dir (kept for re-runs), prepares each in a fresh
process and prints a markdown table of the parent's and the largest worker's peak RSS growth (exact: VmHWM and
ru_maxrss; Linux only). Usage: python scripts/bench_prepare_memory.py 100 500 2048 [--dir /tmp/gptlab_prepare_memory]
[--tokenizer bytes|gpt2] [--num-proc 2] [--shard-tokens 100000000]
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
    parser.add_argument("sizes_mib", nargs="+", type=positive_int, help="corpus sizes in MiB of JSONL text")
    parser.add_argument("--dir", type=writable_dir, default=Path("/tmp/gptlab_prepare_memory"),
                        help="corpora and caches")
    parser.add_argument("--tokenizer", type=tokenizer, default="bytes",
                        help="bytes, or a tiktoken encoding (gpt2 needs its ranks "
                        "in data/cache/tiktoken: scripts/fetch_gpt2_ranks.py)")
    parser.add_argument("--num-proc", type=positive_int, default=os.cpu_count() or 1, help="tokenizing workers")
    parser.add_argument("--shard-tokens", type=positive_int, default=100_000_000,
                        help="data.shard_tokens (its default)")
    args = parser.parse_args()
    from gptlab.tools.benchmarks.prepare_memory import main as run

    run(args.sizes_mib, args.dir, args.tokenizer, args.num_proc, args.shard_tokens)


if __name__ == "__main__":
    main()
