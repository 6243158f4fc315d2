"""muP's LR transfer from a finished `experiment=mup_transfer` sweep: the table, one verdict line per
parametrization, and the plot (final val loss against LR, a line per width).

    python src/train.py -m experiment=mup_transfer
    python scripts/mup_transfer_plot.py outputs/multiruns/mup_transfer/<date>/<time> [--out mup_transfer.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlab.launch.cli import user_errors_exit
from gptlab.report.mup_transfer import plot_transfer, transfer_table, transfer_verdicts, width_curves


@user_errors_exit
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep dir `train.py -m experiment=mup_transfer` printed")
    parser.add_argument("--out", type=Path, default=None, help="the plot; default <sweep_dir>/mup_transfer.png")
    args = parser.parse_args()
    curves = width_curves(args.sweep_dir)
    print(transfer_table(curves))
    print()
    for line in transfer_verdicts(curves):
        print(line)
    out = args.out or args.sweep_dir / "mup_transfer.png"
    plot_transfer(curves, out)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
