"""Signal a 2-rank DDP job (CPU, gloo) at chosen moments and check that every rank ends in time with a loadable
preemption checkpoint (last.ckpt), the documented exit code and one line saying how to resume; also a lost rank and
a NaN on one rank.

    python scripts/preemption_drill.py                 # 10 SIGTERMs to rank 0, 10 to rank 1, 5 SIGUSR1s to all,
                                                       # a SIGKILLed rank, a NaN on one rank (~10 min, 2-core CPU)
    python scripts/preemption_drill.py --repeats 2 --seed 1

Prints one row per job; exits 1 unless every job passed.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import sys
import time

from gptlab.launch.arguments import positive_int, positive_number, seed
from gptlab.tools.drill_cli import drill_parser


def main() -> None:
    parser = drill_parser(__doc__)
    parser.add_argument("--repeats", type=positive_int, default=10, help="SIGTERMs to rank 0, and as many to rank 1")
    parser.add_argument("--seed", type=seed, default=0, help="seeds the aimed steps and the random moments")
    parser.add_argument("--deadline", type=positive_number, default=60.0,
                        help="seconds from a signal to the end of all ranks")
    args = parser.parse_args()
    from gptlab.tools.preemption_drill import drill_cases, outcome_row, run_preemption_drill

    started = time.perf_counter()
    outcomes = run_preemption_drill(drill_cases(args.repeats, args.seed), args.seed, args.deadline, args.workdir,
                                    args.keep, report=lambda o: print(outcome_row(o), flush=True))
    passed = sum(o.passed for o in outcomes)
    slowest = max((o.seconds for o in outcomes if o.seconds is not None), default=0.0)
    print(f"{passed}/{len(outcomes)} jobs passed; slowest end {slowest:.1f} s after its signal; "
          f"{time.perf_counter() - started:.0f} s in all")
    sys.exit(0 if passed == len(outcomes) else 1)


if __name__ == "__main__":
    main()
