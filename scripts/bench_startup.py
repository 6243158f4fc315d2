"""Each entry point's start-up CPU time against `python -c "import torch"`, measured in the same run (interleaved
rounds, median): a config error, --help and --cfg job must stay within 1.5x of it (issue 55).

Usage: python scripts/bench_startup.py [--repeats 3] [--only help cfg ...]
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from gptlab.launch.arguments import ArgumentParser, positive_int
from gptlab.launch.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="interleaved rounds; the table shows the median")
    parser.add_argument("--only", nargs="*", help="time only the commands whose name holds one of these words")
    args = parser.parse_args()
    from gptlab.tools.benchmarks.startup import main as run

    run(args.repeats, args.only)


if __name__ == "__main__":
    main()
