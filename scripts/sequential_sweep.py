"""A sweep that adds seeds in rounds until every verdict is decided, or the seed budget is spent:

    python scripts/sequential_sweep.py outputs/seq/pos_emb --start 3 --step 2 --budget 9 \
        --baseline model.pos_emb=learned -- experiment=ablate_pos_emb model.pos_emb=learned,rope

Round k launches `src/train.py -m <overrides> seed=<its new seeds> hydra.sweep.dir=<dir>/round_<k>`; after it, every
variant is compared with the baseline on all seeds so far, at the look's share of alpha (gptlab.report.sequential
says which rule and why repeated looks keep the error rate). Run the same command again to resume: finished rounds'
jobs are skipped as in any sweep; the plan (the looks, alpha, margin, baseline and overrides) is recorded in
<dir>/sequential_plan.json when it starts, and a resume that asks for another is refused. Writes
<dir>/sequential_report.md with the seeds used and saved.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import argparse
import json
import os
import sys
from pathlib import Path

from gptlab.atomic import atomic_write_text
from gptlab.errors import ConfigError
from gptlab.launch import child_run
from gptlab.launch.arguments import ArgumentParser, integer, positive_int, positive_number, probability
from gptlab.launch.cli import user_errors_exit
from gptlab.report.sequential import PLAN_FILE, look_alphas, look_verdicts, looks, plan_refusal

TRAIN = Path(__file__).resolve().parents[1] / "src" / "train.py"


def launch(overrides: list[str], seeds: range, sweep_dir: Path) -> None:
    command = [sys.executable, str(TRAIN), "-m", *overrides, "seed=" + ",".join(map(str, seeds)),
               f"hydra.sweep.dir={sweep_dir}"]
    print("+", " ".join(command), flush=True)
    code = child_run.run(command, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    if code != 0:
        raise ConfigError(f"round {sweep_dir.name} failed (exit {code}); see its jobs' train.log, fix, and "
                          "run this command again to resume.")


def check_plan(args: argparse.Namespace) -> None:
    """Record the plan when the sweep starts; refuse a resume that asks for another (report.sequential)."""
    asked = {"start": args.start, "step": args.step, "budget": args.budget, "alpha": args.alpha,
             "margin": args.margin, "baseline": args.baseline, "overrides": args.overrides}
    path = args.dir / PLAN_FILE
    if not path.is_file():
        args.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(asked, indent=2) + "\n")
        return
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} cannot be read ({err}): it is the plan this sequential sweep started with; "
                          "restore it, or start the sweep in another dir.") from err
    refused = plan_refusal(recorded, asked, args.dir)
    if refused:
        raise ConfigError(refused)


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path, help="the sequential sweep's dir: one sweep dir per round inside")
    parser.add_argument("--start", type=integer(2), default=3, help="seeds per arm at the first look (default 3)")
    parser.add_argument("--step", type=positive_int, default=2, help="seeds per arm each round adds (default 2)")
    parser.add_argument("--budget", type=integer(2), default=9, help="the most seeds per arm (default 9)")
    parser.add_argument("--baseline", help="the variant compared against, k=v (default: the first variant)")
    parser.add_argument("--alpha", type=probability, default=0.05,
                        help="family-wise error over all looks (default 0.05)")
    parser.add_argument("--margin", type=positive_number.e_g("0.005"), default=None,
                        help="equivalence margin: equivalent also decides")
    parser.add_argument("overrides", nargs="+", help="train.py's overrides after --, without seed")
    args = parser.parse_args()
    if args.start > args.budget:
        parser.refuse(f"--start {args.start} --budget {args.budget}: the first look cannot have more seeds than the "
                      "budget; use --start <= --budget, e.g. --start 3 --step 2 --budget 9.")
    check_plan(args)
    from gptlab.report.stats import verdict

    counts = looks(args.start, args.step, args.budget)
    shares = look_alphas(counts, args.alpha)
    text, used, before = "", counts[-1], 0
    for k, (n, share) in enumerate(zip(counts, shares), start=1):
        launch(args.overrides, range(before + 1, n + 1), args.dir / f"round_{k}")
        before = n
        labels, judged, all_decided = look_verdicts([args.dir / f"round_{i}" for i in range(1, k + 1)],
                                                    args.baseline, share, args.margin)
        text += f"\n## Look {k}: {n} seeds per arm, this look's alpha {share:.4g}\n\n" + "".join(
            f"- {verdict(label, j.comparison, 4)}" + (f"; {j.equivalence.text()}" if j.equivalence else "") + "\n"
            for label, j in zip(labels, judged))
        if all_decided:
            used = n
            break
    arms = len(labels) + 1
    head = (f"# Sequential sweep: {args.dir}\n\nLooks at {counts} seeds per arm, alpha {args.alpha} spent as "
            f"alpha·(n/{counts[-1]})² (gptlab.report.sequential: Boole's inequality over the looks). "
            + (f"Every verdict decided after {used} seeds per arm: {arms} arms × {counts[-1] - used} = "
               f"{arms * (counts[-1] - used)} runs saved against the fixed design of {counts[-1]} seeds per arm.\n"
               if all_decided else f"Budget spent ({counts[-1]} seeds per arm) with verdicts undecided.\n"))
    atomic_write_text(args.dir / "sequential_report.md", head + text)
    print(head + text)


if __name__ == "__main__":
    main()
