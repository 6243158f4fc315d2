"""torch's intra-op threads as gptlab chooses them (runtime.cpu_threads=null) against every fixed count, with the
machine as found and with the other cores kept busy: the choice must never be slower than the best fixed count.

Usage: python scripts/bench_threads.py [--rounds 3] [--steps 5]
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from gptlab.launch.arguments import ArgumentParser, positive_int
from gptlab.launch.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds; the table shows the median")
    parser.add_argument("--steps", type=positive_int, default=5, help="timed training steps per measurement")
    args = parser.parse_args()
    from gptlab.tools.benchmarks.threads_speed import main as run

    run(args.rounds, args.steps)


if __name__ == "__main__":
    main()
