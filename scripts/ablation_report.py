"""Summarise a sweep: `python scripts/ablation_report.py <sweep dir>` writes ablation_report.md and
val_loss.png into that dir and prints the table."""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlab.cli import user_errors_exit
from gptlab.tools.reporting import write_report


@user_errors_exit
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sweep_dir", type=Path, help="a multirun dir, e.g. outputs/multiruns/ablate_norm/<date>/<time>")
    table, plot = write_report(parser.parse_args().sweep_dir)
    print(table.read_text())
    print(f"wrote {table} and {plot}")


if __name__ == "__main__":
    main()
