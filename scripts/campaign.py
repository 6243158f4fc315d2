"""A research campaign kept honest as a whole (docs/campaigns.md): every run and verdict in one MLflow ledger,
each new variant tested against the baseline at the level LORD++ grants (the campaign's FDR stays <= q), claimed
wins confirmed on fresh seeds, and a confirmed win promoted to baseline.

    python scripts/campaign.py init nano --baseline-sweep <sweep dir of the baseline's seeds>
    python scripts/campaign.py run nano -- model.pos_emb=none          # the baseline's seeds, recorded, tested
    python scripts/campaign.py add nano <sweep dir>                     # a sweep run by hand
    python scripts/campaign.py list nano --json
    python scripts/campaign.py confirm nano --variant model.pos_emb=none --seeds 3
    python scripts/campaign.py promote nano --variant model.pos_emb=none

The store is --store, else $GPTLAB_TRACKING_URI, else sqlite:///outputs/mlflow.db (`mlflow ui --backend-store-uri
sqlite:///outputs/mlflow.db` shows it).
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import argparse
import json
from pathlib import Path

from gptlab.campaign import launch, ledger
from gptlab.campaign.ledger import BUDGETS
from gptlab.campaign.store import store_uri
from gptlab.launch.arguments import ArgumentParser, existing_dir, integer, probability
from gptlab.launch.cli import user_errors_exit


def _parser() -> ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=None, help="MLflow tracking URI (default sqlite:///outputs/mlflow.db)")
    common.add_argument("--json", action="store_true", help="print the campaign as JSON (docs/campaigns.md schema)")
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    init = sub.add_parser("init", help="start a campaign from its baseline's sweep", parents=[common])
    init.add_argument("name")
    init.add_argument("--baseline-sweep", type=existing_dir, required=True,
                      help="a -m sweep of the baseline over seeds")
    init.add_argument("--q", type=probability, default=0.05, help="the campaign's false discovery rate (default 0.05)")
    init.add_argument("--budget", choices=BUDGETS, default=None,
                      help="the budget verdicts are matched at: tokens, flops or seconds (wall clock; refused across "
                           "device kinds and machines)")
    init.add_argument("--label", default="baseline", help="the first baseline's name (default: baseline); every "
                      "variant is named by its overrides that differ from it")
    for name, text in (("add", "record a sweep's runs and test what is ready"),
                       ("run", "run a variant on the campaign's seeds, record it, test it")):
        one = sub.add_parser(name, help=text, parents=[common])
        one.add_argument("name")
        if name == "add":
            one.add_argument("sweep_dir", type=existing_dir)
            one.add_argument("--no-judge", action="store_true", help="record only (an array job; judge later)")
        else:
            one.add_argument("overrides", nargs="*", help="Hydra overrides on top of the baseline's")
            one.add_argument("--fresh", action="store_true", help="run on seeds the campaign never used (an A/A arm)")
            one.add_argument("--out", type=Path, default=Path("outputs/campaigns"), help="where its sweep dir goes")
        one.add_argument("--label", default=None, help="name the variant (an A/A arm: the baseline's config under "
                                                       "another name); default: its overrides")
    for name in ("judge", "list"):
        sub.add_parser(name, help="test what is ready" if name == "judge" else "the variants, verdicts, status",
                       parents=[common]).add_argument("name")
    for name, text in (("confirm", "re-run a claimed variant and the baseline on fresh seeds, then test"),
                       ("promote", "make a confirmed variant the baseline")):
        one = sub.add_parser(name, help=text, parents=[common])
        one.add_argument("name")
        one.add_argument("--variant", required=True, help="the variant's name as `list` prints it")
        if name == "confirm":
            one.add_argument("--seeds", type=integer(2), default=3, help="fresh seeds per arm, at least 2 (default 3)")
            one.add_argument("--out", type=Path, default=Path("outputs/campaigns"), help="where its sweep dirs go")
    return parser


def _run(uri: str, args: argparse.Namespace) -> None:
    from gptlab.campaign import actions, confirm

    campaign = ledger.load(uri, args.name)
    overrides = {**actions.baseline_overrides(campaign), **launch.parse_overrides(args.overrides)}
    base = actions.baseline(campaign).tag("variant")
    seeds = (confirm.fresh_seeds(campaign, len(actions.arm_seeds(campaign, base))) if args.fresh
             else actions.arm_seeds(campaign, base))
    out = launch.sweep_dir(args.out, args.name, args.label or " ".join(args.overrides))
    launch.train(overrides, seeds, out)
    actions.add(uri, args.name, out, args.label)


def _confirm(uri: str, args: argparse.Namespace) -> None:
    from gptlab.campaign import actions, confirm

    campaign = ledger.load(uri, args.name)
    claim = confirm.claimed(campaign, args.variant)
    seeds = confirm.fresh_seeds(campaign, args.seeds)
    base = claim.tag("baseline")
    for variant in (base, args.variant):
        runs = [r for r in campaign.of("run") if r.tag("variant") == variant]
        out = launch.sweep_dir(args.out, args.name, f"confirm-{variant}")
        launch.train(json.loads(runs[0].tag("overrides")), seeds, out)
        label = variant if variant != actions.variant_of(campaign, runs[0]) else None
        actions.add(uri, args.name, out, label, actions.CONFIRM, judge_now=False)
    confirm.judge_confirmation(uri, args.name, args.variant)


@user_errors_exit
def main() -> None:
    args = _parser().parse_args()
    from gptlab.campaign import actions, confirm, view

    uri = store_uri(args.store)
    if args.command == "init":
        actions.start(uri, args.name, args.baseline_sweep, args.q, args.budget, args.label)
    elif args.command == "add":
        actions.add(uri, args.name, args.sweep_dir, args.label, judge_now=not args.no_judge)
    elif args.command == "run":
        _run(uri, args)
    elif args.command == "judge":
        actions.judge(uri, args.name)
    elif args.command == "confirm":
        _confirm(uri, args)
    elif args.command == "promote":
        confirm.promote(uri, args.name, args.variant)
    campaign = ledger.load(uri, args.name)
    print(json.dumps(view.as_json(campaign), indent=2) if args.json else view.markdown(campaign))


if __name__ == "__main__":
    main()
