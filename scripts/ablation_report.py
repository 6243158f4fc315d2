"""Summarise a sweep: `python scripts/ablation_report.py <sweep dir>` writes ablation_report.md and
val_loss.png into that dir and prints the report. Jobs that differ only in `seed` are one variant; each
variant is compared with the baseline by Welch's t-test across seeds.

    python src/train.py -m experiment=ablate_norm seed=1,2,3
    python scripts/ablation_report.py <sweep dir> --baseline model.norm=pre --alpha 0.05 --x flops --band std
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlab.report.runs import BANDS, X_AXES, write_report
from gptlab.runtime.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="a multirun dir, e.g. outputs/multiruns/ablate_norm/<date>/<time>")
    parser.add_argument("--baseline", help="the variant compared against, k=v[,k2=v2] (default: the first variant)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the test (default 0.05)")
    parser.add_argument("--x", choices=X_AXES, default=None,
                        help="plot's x axis (default: flops when the variants' FLOPs per token differ, else tokens)")
    parser.add_argument("--band", choices=BANDS, default="minmax", help="shaded band: min–max over seeds or ±1 std")
    args = parser.parse_args()
    table, plot = write_report(args.sweep_dir, baseline=args.baseline, alpha=args.alpha, x=args.x, band=args.band)
    print(table.read_text())
    print(f"wrote {table} and {plot}")


if __name__ == "__main__":
    main()
