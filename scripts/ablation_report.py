"""Summarise a sweep: `python scripts/ablation_report.py <sweep dir>` writes ablation_report.md and
val_loss.png into that dir and prints the report. Jobs that differ only in `seed` are one variant; each
variant is compared with the baseline seed by seed (the paired t-test) where both ran the same seeds with paired
seeds, else by Welch's t-test, with Holm's correction across variants, the seeds' power (--effect: the seeds an
effect needs) and, with --margin, equivalence. A sweep over the learning rate too
(`optimizer.lr=1e-3,3e-3,1e-2`, or hparams_search=lr_grid) gets the LR-tuned report: each variant's LR-sensitivity
curve, and verdicts at each variant's own best LR (lr_sensitivity.png instead of val_loss.png). A sweep over model
sizes (`+ladder=w16,w24,w32,w48`, experiment=ladder_gpt2_to_llama) gets the scaling-ladder report: L(C) fits and
each variant's compute multiplier with bootstrap intervals (scaling_ladder.png).

    python src/train.py -m experiment=ablate_norm seed=1,2,3
    python scripts/ablation_report.py <sweep dir> --baseline model.norm=pre --alpha 0.05 --x flops --band std

With `--context L`, the variants are compared on their loss at context L, scored by `src/eval.py ckpt_path=<sweep dir>
contexts=[...]` (context_report_<L>.md and loss_by_position.png).
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import argparse
import json
from pathlib import Path

from gptlab.launch.arguments import ArgumentParser, integer, positive_int, positive_number, probability
from gptlab.launch.cli import user_errors_exit
from gptlab.report.choices import BANDS, CORRECTIONS, TESTS, X_AXES
from gptlab.report.output_dir import one_report_writer


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="a multirun dir, e.g. outputs/multiruns/ablate_norm/<date>/<time>")
    parser.add_argument("--baseline", help="the variant compared against, k=v[,k2=v2] (default: the first variant)")
    parser.add_argument("--alpha", type=probability, default=0.05, help="significance level of the test (default 0.05)")
    parser.add_argument("--x", choices=X_AXES, default=None,
                        help="plot's x axis (default: flops when the variants' FLOPs per token differ, else tokens)")
    parser.add_argument("--band", choices=BANDS, default="minmax", help="shaded band: min–max over seeds or ±1 std")
    parser.add_argument("--test", choices=TESTS, default="paired",
                        help="paired: the paired t-test where both arms ran the same seeds with paired_seeds=true, "
                             "Welch's elsewhere (default); welch: Welch's on every comparison")
    parser.add_argument("--correction", choices=CORRECTIONS, default="holm",
                        help="with several variants: holm holds the family-wise error at alpha (default); none tests "
                             "each alone")
    parser.add_argument("--margin", type=positive_number.e_g("0.005"), default=None,
                        help="equivalence margin in val/loss, e.g. 0.005: each verdict says equivalent (TOST), not "
                             "equivalent, or undecided with the seeds needed")
    parser.add_argument("--effect", type=positive_number.e_g("0.002"), default=None,
                        help="a val/loss difference worth finding, e.g. 0.002: the seeds per arm it needs, paired and "
                             "unpaired, from the sweep's own seed sigma")
    parser.add_argument("--lr-key", default="optimizer.lr",
                        help="the override whose values are the LR grid (default optimizer.lr; none: no LR grid)")
    parser.add_argument("--size-key", default="+ladder",
                        help="the override whose values are a scaling ladder's sizes (default +ladder; none: no "
                             "ladder)")
    parser.add_argument("--target-flops", type=positive_number.e_g("1e15"), default=None,
                        help="ladder: the compute to extrapolate the multiplier to (default 10x the largest rung; "
                             "beyond that it is marked EXTRAPOLATED)")
    parser.add_argument("--boot", type=integer(10), default=1000,
                        help="ladder: bootstrap resamples, at least 10 (default 1000, for a 95%% interval)")
    parser.add_argument("--json", action="store_true",
                        help="print the verdicts as JSON (docs/campaigns.md#the-reports-json) instead of the markdown")
    parser.add_argument("--campaign", default=None,
                        help="record the sweep in this campaign's ledger and test its variants at the levels the "
                             "campaign grants (docs/campaigns.md)")
    parser.add_argument("--store", default=None, help="--campaign's MLflow store (default sqlite:///outputs/mlflow.db)")
    parser.add_argument("--context", type=positive_int.e_g("1024"), default=None,
                        help="compare the loss at this context length (from src/eval.py contexts=[...] on the sweep) "
                             "instead of the final val/loss at the trained one")
    args = parser.parse_args()
    if args.json and args.context is not None:
        parser.refuse("--json covers the final val/loss verdicts; drop --context, or drop --json and read "
                      "context_report_<L>.md.")
    from gptlab.report.context_report import write_context_report
    from gptlab.report.sweep import write_sweep_report
    from gptlab.report.verdicts_json import sweep_verdicts

    with one_report_writer(args.sweep_dir):  # a second report of this sweep waits for this one
        if args.context is not None:
            table, plot = write_context_report(args.sweep_dir, args.context, args.baseline, args.alpha, args.test,
                                               args.correction, args.margin, args.effect)
        else:
            table, plot = write_sweep_report(args.sweep_dir, baseline=args.baseline, alpha=args.alpha, x=args.x,
                                             band=args.band, lr_key=args.lr_key, size_key=args.size_key,
                                             target_flops=args.target_flops, n_boot=args.boot, test=args.test,
                                             correction=args.correction, margin=args.margin, effect=args.effect)
        text = table.read_text()
    found = campaign_part(args.sweep_dir, args.campaign, args.store, args.json) if args.campaign else None
    if args.json:
        data = sweep_verdicts(args.sweep_dir, args.baseline, args.alpha, args.test, args.correction, args.margin)
        print(json.dumps({**data, "campaign": found}, indent=2))
        return
    print(text + (found or ""))
    print(f"wrote {table} and {plot}")


def campaign_part(sweep_dir: Path, name: str, store: str | None, as_json: bool) -> str | dict:
    """The campaign's verdicts on this sweep's variants (imported only when a campaign is named: MLflow is an
    extra)."""
    from gptlab.campaign.report_part import sweep_in_campaign

    return sweep_in_campaign(sweep_dir, name, store, as_json)


if __name__ == "__main__":
    main()
