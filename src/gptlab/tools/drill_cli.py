"""The command-line options every drill script shares: where its runs go and whether they are kept."""

from __future__ import annotations

import argparse

from gptlab.launch.arguments import ArgumentParser, existing_dir


def drill_parser(doc: str) -> argparse.ArgumentParser:
    """A parser described by the script's docstring's first line, with --workdir and --keep."""
    parser = ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--workdir", type=existing_dir, default=None,
                        help="where the runs go (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the runs and their logs")
    return parser
