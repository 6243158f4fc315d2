"""Data pipeline throughput, as ratios measured in one run (CPU shared, so only ratios are comparable):

1. prepare: python_stdlib with the GPT-2 tokenizer at num_proc 1 and 2 (tokens/s);
2. loaders: batches/s of the default pydocs loader, the memmapped shard loader and the streaming loader,
   against the tokens/s the default model (`python src/train.py`) consumes in training steps. Goal: >= 100x.

Usage: python scripts/bench_data.py [--steps 20] [--batches 300]
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from gptlab.launch.arguments import ArgumentParser, positive_int


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=positive_int, default=20, help="training steps timed for the consumption rate")
    parser.add_argument("--batches", type=positive_int, default=300, help="batches timed per loader")
    args = parser.parse_args()
    from gptlab.tools.benchmarks.data import main as run

    run(args.steps, args.batches)


if __name__ == "__main__":
    main()
