"""Running a variant for the campaign: `python src/train.py -m` with the baseline's overrides, the variant's on top,
and the campaign's seeds, into a sweep dir of its own under outputs/campaigns/<name>/."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from gptlab.errors import ConfigError
from gptlab.launch import child_run

TRAIN = Path(__file__).resolve().parents[2] / "train.py"


def parse_overrides(items: list[str]) -> dict[str, str]:
    bad = [item for item in items if "=" not in item or item.startswith("-")]
    if bad:
        raise ConfigError(f"{bad[0]}: a variant is Hydra overrides k=v, e.g. model.pos_emb=none.")
    return dict(item.split("=", 1) for item in items)


def sweep_dir(root: Path, campaign: str, what: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", what.replace("=", "-"))[:60] or "baseline"
    return root / campaign / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}"


def train(overrides: dict[str, str], seeds: list[int], out: Path) -> None:
    """Run the sweep; its failure is the user's to read in its output (the campaign records what finished)."""
    if "seed" in overrides:
        raise ConfigError("seed=...: the campaign chooses the seeds (its baseline's, or fresh ones with --fresh); "
                          "drop seed= from the overrides, or pass --seeds 1,2,3.")
    argv = [sys.executable, str(TRAIN), "-m", *(f"{k}={v}" for k, v in overrides.items()),
            "seed=" + ",".join(map(str, seeds)), f"hydra.sweep.dir={out}"]
    print("running: " + " ".join(argv[1:]), flush=True)
    code = child_run.run(argv)
    if code != 0 and not out.is_dir():
        raise ConfigError(f"the variant's sweep stopped before any job ran (exit {code}, its error is above); fix the "
                          "overrides and run the same campaign command again.")
    if code != 0:
        print(f"the sweep exited with {code}; recording the jobs that finished", file=sys.stderr)
