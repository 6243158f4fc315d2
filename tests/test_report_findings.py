"""What the reports show beyond a mean: unstable runs marked, intervals over seeds that cover the truth, the
stability probes against the LR, `--baseline` spelt as Hydra accepts it, and a sweep dir's foreign or damaged job
dirs named and left out (synthetic sweep dirs as train.py leaves them)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
from test_report_stats import make_job, make_sweep, verdict_line

from gptlab.report.lr_tuning import LrRun
from gptlab.report.runs import write_report
from gptlab.report.sweep import write_sweep_report

INIT = 5.4  # a measured initial loss, below ln(257) = 5.549 as real runs' are


def train_curve(final: float, rise: float | None = None) -> list[tuple[int, float]]:
    """train/loss from INIT at Lightning step 0 (the first step) down to `final`; with `rise`, up to it at step 4
    first, then down (an unstable run that recovers)."""
    points = [(0, INIT), (1, INIT - 0.3), (2, INIT - 0.6)]
    if rise is not None:
        points += [(3, rise), (4, rise - 0.5)]
    return points + [(9, final + 0.2), (19, final)]


def lr_sweep(tmp_path: Path, probes: bool = False, unstable: tuple[str, str] = ("1e-1", "post")) -> Path:
    """model.norm pre/post × lr 1e-3, 1e-2, 1e-1 × seeds 1..3; a bowl around 1e-2; the `unstable` (lr, norm) runs
    rise above their initial loss and recover to the unigram level."""
    sweep, index = tmp_path / "sweep", 0
    for norm in ("pre", "post"):
        for lr in ("1e-3", "1e-2", "1e-1"):
            for seed in (1, 2, 3):
                final = 3.0 + 0.3 * (math.log10(float(lr)) + 2) ** 2 + 0.01 * seed + (0.05 if norm == "post" else 0)
                bad = (lr, norm) == unstable
                scalars = {"train/loss": train_curve(final, rise=7.0 + seed if bad else None)}
                if probes:
                    logit = 3.0 * float(lr) * 1e4 * (10 if norm == "post" else 1)
                    scalars |= {"x_probes/attn_logit_max/layer_0": [(9, logit / 10), (19, logit)],
                                "x_probes/z_loss": [(9, 30.0), (19, 36.0)]}
                make_job(sweep, index, {"model.norm": norm, "optimizer.lr": lr, "seed": str(seed)},
                         [final + 0.5, final], scalars=scalars)
                index += 1
    return sweep


def row(text: str, start: str) -> list[str]:
    return next(r for r in text.splitlines() if r.startswith(start)).split(" | ")


def test_instability_is_a_rise_above_the_measured_initial_loss_or_a_spike() -> None:
    from gptlab.report.instability import SPIKE_NATS, classify

    assert classify(train_curve(3.0)).kind == "stable"
    rose = classify([(1, 5.4), (2, 5.0), (3, 8.0), (4, 4.0), (20, 3.2)])
    assert rose.kind == "unstable" and "8.00 at step 3 > initial 5.40" in rose.detail and rose.initial == 5.4
    spike = classify([(1, 5.4), (10, 2.5), (11, 2.5 + SPIKE_NATS + 0.1), (20, 2.4)])
    assert spike.kind == "unstable" and "spiked" in spike.detail and "step 11" in spike.detail
    assert classify([(1, 5.4), (10, 2.5), (11, 2.5 + SPIKE_NATS - 0.1)]).kind == "stable"  # under the threshold
    assert classify([(1, 5.4), (5, float("nan"))]).kind == "diverged"
    assert classify([(1, 5.4)], diverged="train/loss is inf at step 3").kind == "diverged"
    # The first loss logged only at step 10 (log_every_n_steps=10), already above the uniform prediction's.
    late = classify([(10, 6.6), (20, 3.2)], uniform_loss=math.log(257))
    assert late.kind == "unstable" and "above ln(vocabulary)" in late.detail


def test_an_unstable_run_is_marked_in_the_table_the_sensitivity_and_the_plot(tmp_path: Path) -> None:
    sweep = lr_sweep(tmp_path)
    table, plot = write_sweep_report(sweep, baseline="model.norm=pre")
    text = table.read_text()
    loss_row = row(text, "| model.norm=post | ")  # the first table: final val/loss against LR
    assert "(3 unstable)" in loss_row[3] and "unstable" not in loss_row[1] + loss_row[2]
    assert loss_row[5].endswith("; unstable at lr=0.1 |")  # beside the LR sensitivity
    assert "unstable" not in row(text, "| model.norm=pre | ")[5]
    assert "**unstable** = a logged train/loss rose more than 1% above the run's initial loss" in text
    jobs = [r for r in text.split("## Jobs")[1].splitlines() if r.startswith("| ")][2:]
    marked = [r for r in jobs if "| unstable (train/loss " in r]
    assert len(marked) == 3 and all("| post | 1e-1 |" in r for r in marked)
    assert all(f"{INIT:.4f} (step 1)" in r for r in jobs)  # the measured initial loss, at the first step
    # The sensitivity caps at the measured initial loss (5.4), not ln(257): the unstable runs ended below it.
    assert "L0 each run's measured initial loss" in text
    assert plot.stat().st_size > 5000


def test_sensitivity_interval_covers_the_truth_on_curves_with_known_noise() -> None:
    """Seeds scatter around a known LR-loss curve; over 40 seeded repeats the 95% interval of the sensitivity
    and of the difference between two variants must hold the true value in nearly all (not flaky: fixed seeds)."""
    from gptlab.report.seed_bootstrap import lr_intervals

    grid = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
    true = {"a": [3.6, 3.3, 3.0, 3.2, 3.7], "b": [3.5, 3.1, 3.0, 3.4, 4.1]}
    truth = {v: float(np.mean(np.asarray(c) - min(c))) for v, c in true.items()}
    sigma, n_seeds, covered, covered_diff, repeats = 0.05, 8, 0, 0, 40
    for rep in range(repeats):
        rng = np.random.default_rng(1000 + rep)
        runs = [LrRun(v, lr, str(s), float(curve[i] + rng.normal(0, sigma)), init=5.4)
                for v, curve in true.items() for i, lr in enumerate(grid) for s in range(n_seeds)]
        ivs = lr_intervals(runs, "a", cap=5.4, n_boot=400, seed=rep)
        covered += ivs["b"].sensitivity.low <= truth["b"] <= ivs["b"].sensitivity.high
        d = ivs["b"].d_sensitivity
        covered_diff += d.low <= truth["b"] - truth["a"] <= d.high
    assert covered >= 0.85 * repeats and covered_diff >= 0.85 * repeats, (covered, covered_diff)


def test_a_variant_better_at_every_lr_scores_lower_on_the_shared_reference() -> None:
    """Wortsman's sensitivity measures each variant against its own best: `flat` is better at every LR yet more
    sensitive by it; its excess over the sweep's best loss is lower, by an interval that excludes 0."""
    from gptlab.report.seed_bootstrap import lr_intervals

    grid = [1e-3, 1e-2, 1e-1]
    curves = {"base": [3.2, 3.0, 3.2], "flat": [2.9, 2.5, 2.9]}
    runs = [LrRun(v, lr, str(s), c[i] + 0.01 * s, init=5.4) for v, c in curves.items() for i, lr in enumerate(grid)
            for s in range(4)]
    ivs = lr_intervals(runs, "base", cap=5.4, n_boot=200)
    assert ivs["flat"].sensitivity.value > ivs["base"].sensitivity.value
    assert ivs["flat"].d_excess.high < 0 and not ivs["flat"].d_excess.spans_zero


def test_no_p_value_when_an_optimum_sits_on_the_grids_edge(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for index, (norm, lr, seed) in enumerate((n, lr, s) for n in ("pre", "post") for lr in ("1e-3", "1e-2")
                                             for s in (1, 2)):
        final = (3.0 if lr == "1e-3" else 3.3) + 0.02 * seed + (0.1 if norm == "post" else 0)  # best at the lowest
        make_job(sweep, index, {"model.norm": norm, "optimizer.lr": lr, "seed": str(seed)}, [final + 0.5, final])
    text = write_sweep_report(sweep)[0].read_text()
    line = verdict_line(text, "model.norm=post")
    assert "optimum at grid edge: widen the grid (no p-value)" in line and "p=" not in line


def test_false_and_False_and_1e3_and_0001_select_the_same_baseline(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"False": [3.0, 3.01], "True": [3.5, 3.49]}, key="model.qk_norm")
    for spelling in ("false", "False", "FALSE"):
        text = write_report(sweep, baseline=f"model.qk_norm={spelling}")[0].read_text()
        assert "Baseline: model.qk_norm=False (--baseline)" in text, spelling
    sweep = make_sweep(tmp_path / "lr", {"0.001": [3.0, 3.01], "0.01": [3.5, 3.49]}, key="optimizer.beta")
    text = write_report(sweep, baseline="optimizer.beta=1e-3")[0].read_text()
    assert "Baseline: optimizer.beta=0.001 (--baseline)" in text


def test_the_logit_plot_is_written_with_probes_and_skipped_with_a_note_without(tmp_path: Path) -> None:
    sweep = lr_sweep(tmp_path / "with", probes=True)
    text = write_sweep_report(sweep)[0].read_text()
    assert (sweep / "lr_probes.png").stat().st_size > 5000
    assert "## Mechanism: stability probes against the LR" in text and "1e+04" in text
    # post at lr=0.1 reaches 3e4 (over the 1e4 level), nothing else does.
    crossed = text.split("Crossed it: ")[1].split("\n")[0]
    assert crossed.count("model.norm=post, lr=0.1") == 3 and "pre" not in crossed and "0.01" not in crossed
    assert row(text, "| model.norm=post | 0.1 |")[3:5] == ["30,000.0", "6.000 |"]
    bare = lr_sweep(tmp_path / "without")
    text = write_sweep_report(bare)[0].read_text()
    assert not (bare / "lr_probes.png").exists()
    assert "No job carries stability probes" in text and "the attention-logit plot is skipped" in text


def test_a_foreign_run_copied_into_a_sweep_is_named_and_left_out(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.01, 2.99], "post": [3.5, 3.51, 3.49]})
    single = make_job(tmp_path / "elsewhere", 0, {"trainer.max_steps": "50"}, [3.2, 3.1])  # a lone run
    shutil.copytree(single, sweep / "copied")
    text = write_report(sweep)[0].read_text()
    assert "6 jobs in 2 variants" in text and "model.norm=, " not in text and "| all jobs |" not in text
    assert "## Not this sweep's jobs, or damaged (left out)\n\n- copied: its overrides" in text


def test_a_job_without_hydra_records_is_left_out_and_the_verdict_stays(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.01, 2.99], "post": [3.5, 3.51, 3.49]})
    shutil.rmtree(sweep / "4" / ".hydra")
    text = write_report(sweep)[0].read_text()  # post keeps 2 seeds: still tested, with little power
    assert ", significant; little power: 2 seeds" in verdict_line(text, "model.norm=post")
    assert "- 4: no .hydra/overrides.yaml: the values it ran with are unknown" in text
    (sweep / "5" / "run_summary.json").write_text("{not json")
    text = write_report(sweep)[0].read_text()
    assert "- 5: " in text and "/5/run_summary.json cannot be read (JSONDecodeError)" in text
    assert "| model.norm=post | 1 |" in text


def test_a_job_that_failed_for_a_reason_gptlab_did_not_record_says_why(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.01], "post": [3.5, 3.49]})
    crashed = sweep / "4"
    (crashed / ".hydra").mkdir(parents=True)
    (crashed / "train.log").write_text("[INFO] - run dir ...\nTraceback (most recent call last):\n"
                                       "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    text = write_report(sweep)[0].read_text()
    assert ("- 4: it stopped on an error gptlab did not record as a failure; its train.log says: RuntimeError: "
            "CUDA error") in text
    json.loads((sweep / "0" / "run_summary.json").read_text())  # nothing of the sweep was rewritten


def test_a_compute_multiplier_whose_interval_spans_one_says_no_difference_found(tmp_path: Path) -> None:
    from test_ladder_report import synthetic_ladder

    same = write_sweep_report(synthetic_ladder(tmp_path / "same", 1.0), baseline="+rung=gpt2", n_boot=50)[0]
    rows = [r for r in same.read_text().splitlines() if r.startswith("| +rung=llama | ") and "| [" in r]
    assert len(rows) == 5 and rows[-1].endswith(": no difference found (spans 1) |"), rows  # at the target
    apart = write_sweep_report(synthetic_ladder(tmp_path / "apart", 2.0), baseline="+rung=gpt2", n_boot=50)[0]
    assert "no difference found" not in apart.read_text()


def test_the_ablation_report_marks_unstable_seeds_in_its_table_and_plot_legend(tmp_path: Path) -> None:
    from gptlab.report.plot import val_loss_figure
    from gptlab.report.runs import group_variants, load_sweep

    sweep, index = tmp_path / "sweep", 0
    for norm in ("pre", "post"):
        for seed in (1, 2, 3):
            rise = 8.0 if (norm, seed) == ("post", 2) else None
            make_job(sweep, index, {"model.norm": norm, "seed": str(seed)}, [3.5, 3.0 + 0.01 * seed],
                     scalars={"train/loss": train_curve(3.0, rise=rise)})
            index += 1
    text = write_report(sweep)[0].read_text()
    assert row(text, "| model.norm=post | 3 |")[-1] == "1 of 3 unstable |"
    assert row(text, "| model.norm=pre | 3 |")[-1] == "stable |"
    legend = [t.get_text() for t in val_loss_figure(group_variants(load_sweep(sweep)), "tokens").axes[0]
              .get_legend().get_texts()]
    assert legend == ["model.norm=pre (n=3)", "model.norm=post (n=3, 1 of 3 unstable)"]


def test_a_job_of_another_sweep_with_the_same_keys_is_told_by_the_sweeps_own_values(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.01], "post": [3.5, 3.49]})
    (sweep / "sweep_config.json").write_text(json.dumps({
        "config": {"name": "synthetic"}, "swept": {"seed": "seed=1,2"},
        "sweeper_params": {"model.norm": "pre,post", "experiment": "x"}}))
    make_job(sweep, 9, {"experiment": "x", "model.norm": "rms", "seed": "1"}, [3.2, 3.1])  # from an rms sweep
    text = write_report(sweep)[0].read_text()
    assert "- 9: model.norm=rms is not one of this sweep's values (pre, post): a run from elsewhere" in text
    assert "4 jobs in 2 variants" in text and "model.norm=rms |" not in text
