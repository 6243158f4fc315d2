"""muP's LR transfer from a finished `experiment=mup_transfer` sweep: the table, one verdict line per
parametrization, and the plot (final val loss against LR, a line per width).

    python src/train.py -m experiment=mup_transfer
    python scripts/mup_transfer_plot.py outputs/multiruns/mup_transfer/<date>/<time> [--out mup_transfer.png]

An existing --out is refused (--overwrite replaces it); without --out the plot is the sweep dir's own
mup_transfer.png, written again on each run as the other sweep reports are.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from pathlib import Path

from gptlab.launch.arguments import ArgumentParser, writable_file
from gptlab.launch.cli import user_errors_exit
from gptlab.report.output_dir import report_dir
from gptlab.runs.write_targets import check_new_file


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep dir `train.py -m experiment=mup_transfer` printed")
    parser.add_argument("--out", type=writable_file, default=None,
                        help="the plot; default <sweep_dir>/mup_transfer.png")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = parser.parse_args()
    if args.out is not None:
        check_new_file("--out", args.out, args.overwrite, "--overwrite")
    from gptlab.report.mup_transfer import plot_transfer, transfer_table, transfer_verdicts, width_curves

    curves = width_curves(args.sweep_dir)
    print(transfer_table(curves))
    print()
    for line in transfer_verdicts(curves):
        print(line)
    out = args.out or report_dir(args.sweep_dir) / "mup_transfer.png"
    plot_transfer(curves, out)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
