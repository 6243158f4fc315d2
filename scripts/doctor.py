"""Self-check of this machine for gptlab: GPU stack, attention kernels, one real training step.

    python scripts/doctor.py                 # on a GPU: the full table in under 3 minutes
    python scripts/doctor.py --device cpu    # the CPU half (also what runs where there is no GPU)

Exits 1 when a check fails (kernels that disagree, a non-finite loss), 0 otherwise; skipped checks say why.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import sys
import time

from gptlab.launch.arguments import ArgumentParser, device, positive_int
from gptlab.launch.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", type=device, default=None, help="cuda | cpu; default: cuda when available")
    parser.add_argument("--attention-T", type=positive_int.e_g("2048"), default=None,
                        help="sequence length of the attention checks")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed repeats per measurement (best is kept)")
    args = parser.parse_args()
    from gptlab.tools.doctor import run

    start = time.perf_counter()
    report = run(args.device, args.attention_T, args.repeats)
    print(report.table())
    print(f"\ndoctor took {time.perf_counter() - start:.0f} s")
    sys.exit(1 if report.failed else 0)


if __name__ == "__main__":
    main()
