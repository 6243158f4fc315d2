"""torch's intra-op threads as gptlab chooses them (runtime.cpu_threads=null) against every fixed count, with the
machine as found and with the other cores kept busy: the choice must never be slower than the best fixed count.

Usage: python scripts/bench_threads.py [--rounds 3] [--steps 5]
"""

import argparse

from gptlab.tools.benchmarks.threads_speed import main as run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the table shows the median")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per measurement")
    args = parser.parse_args()
    run(args.rounds, args.steps)


if __name__ == "__main__":
    main()
