"""The LR-tuned report from sweep dirs (synthetic jobs as train.py leaves them), and a real sweep that goes on
past a diverged job."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import run_script
from test_report_stats import make_job, verdict_line

from gptlab.errors import ConfigError
from gptlab.report.sweep import write_sweep_report

GRID = ("1e-3", "3e-3", "1e-2")


def lr_sweep(tmp_path: Path) -> Path:
    """pre: bowl around 3e-3; post: best at the grid's top (1e-2); post at 1e-2 diverged on seeds 3 and 4."""
    sweep, index = tmp_path / "sweep", 0
    for norm, best in (("pre", 3e-3), ("post", 3e-2)):
        for lr in GRID:
            for seed in (1, 2, 3, 4):
                final = 3.0 + (math.log10(float(lr)) - math.log10(best)) ** 2 + 0.01 * seed
                extra = {"diverged": "train/loss is nan at step 3", "final_val_loss": None} \
                    if (norm, lr, seed) == ("post", "1e-2", 4) else {"final_val_bpb": final / math.log(2)}
                job = make_job(sweep, index, {"model.norm": norm, "optimizer.lr": lr, "seed": str(seed)},
                               [final + 0.5, final], extra=extra)
                if (norm, lr, seed) == ("post", "1e-2", 3):  # diverged, recorded as a failure instead (main's form)
                    (job / "run_summary.json").unlink()
                    (job / "failed.json").write_text(json.dumps({"kind": "diverged", "reason": "loss is inf"}))
                index += 1
    return sweep


def test_lr_sweep_gets_the_lr_tuned_report(tmp_path: Path) -> None:
    sweep = lr_sweep(tmp_path)
    out = run_script("scripts/ablation_report.py", [str(sweep), "--baseline", "model.norm=pre"], check=True).stdout
    assert "24 jobs: 2 variants × 3 learning rates (optimizer.lr = 0.001, 0.003, 0.01) × seeds 1, 2, 3, 4" in out
    assert "best LR is the one with the lowest mean final val/loss on seeds 1, 2; " in out
    assert "on the other seeds, 3, 4" in out
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("- model.norm=")}
    assert lines["- model.norm=pre (baseline)"].endswith("best LR 0.003")
    post = lines["- model.norm=post"]
    assert "NOT an optimum: best LR 0.01 is the highest of the grid: widen the grid toward higher LRs" in post
    # Held-out seeds 3, 4 at the best LRs: post diverged on both, each counted as L0 = ln(257); equal values
    # on one side make Welch's test degenerate, so only the difference is checked.
    pre_test = [3.0 + 0.03, 3.0 + 0.04]
    assert f"{math.log(257) - sum(pre_test) / 2:+.3f}" in post
    row = next(r for r in out.splitlines() if r.startswith("| model.norm=post |")).split(" | ")
    assert "(2 diverged)" in row[3] and "(grid's highest: widen)" in row[4]
    assert "Jobs without a finished run" not in out  # the failure record is read, not reported missing
    assert "## Final val bpb against LR" in out
    assert (sweep / "lr_sensitivity.png").stat().st_size > 5000 and (sweep / "ablation_report.md").exists()


def test_two_seeds_say_the_selection_is_optimistic(tmp_path: Path) -> None:
    sweep, index = tmp_path / "sweep", 0
    for lr, finals in (("1e-3", (3.2, 3.3)), ("3e-3", (3.0, 3.1)), ("1e-2", (3.4, 3.4))):
        for seed, final in enumerate(finals, start=1):
            make_job(sweep, index, {"optimizer.lr": lr, "seed": str(seed)}, [final + 0.5, final])
            index += 1
    text = write_sweep_report(sweep)[0].read_text()
    assert "picked and tested on the same seeds, 1, 2. The verdicts are optimistic" in text
    assert "- all jobs (baseline): best LR 0.003" in text
    json.loads((sweep / "0" / "run_summary.json").read_text())  # the inputs are untouched
    (sweep / "1" / ".hydra" / "overrides.yaml").write_text("- optimizer.lr=fast\n- seed=2\n")
    with pytest.raises(ConfigError, match="optimizer.lr='fast' is not a number"):
        write_sweep_report(sweep)


def sweeper_params(*overrides: str) -> dict[str, str]:
    from helpers import CONF_DIR
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=list(overrides), return_hydra_config=True)
            return dict(cfg.hydra.sweeper.params)
    finally:
        GlobalHydra.instance().clear()


def test_lr_grid_crosses_an_experiments_variants_and_ablate_muon_tunes_both_optimizers() -> None:
    params = sweeper_params("experiment=ablate_norm", "hparams_search=lr_grid")
    assert params == {"model.norm": "pre,post", "optimizer.lr": "1e-3,3e-3,1e-2"}
    params = sweeper_params("experiment=ablate_muon")
    assert params["optimizer"] == "adamw,muon" and len(params["optimizer.lr"].split(",")) >= 3
    assert len(params["seed"].split(",")) >= 4  # enough to hold seeds out of the LR selection


SHARED = {1: 0.03, 2: -0.02, 3: 0.01, 4: -0.03, 5: 0.025, 6: 0.0}  # what a seed does to every variant alike
OWN = {1: 0.0004, 2: -0.0003, 3: 0.0001, 4: 0.0002, 5: -0.0004, 6: 0.0003}


def paired_lr_sweep(tmp_path: Path, depths: dict[str, float], centre: dict[str, float] | None = None) -> Path:
    """Each variant's bowl around 3e-3, `depth` deep; a seed moves every variant alike (paired seeds) but by little
    of its own, so only the paired test sees a 0.02 difference under 0.03 of seed noise."""
    sweep, index = tmp_path / "sweep", 0
    for norm, depth in depths.items():
        for lr in GRID:
            for seed in range(1, 7):
                own = OWN[seed] * (1 if norm == "pre" else -1 if norm == "post" else 0.5)
                best = (centre or {}).get(norm, 3e-3)
                final = depth + (math.log10(float(lr)) - math.log10(best)) ** 2 + SHARED[seed] + own
                make_job(sweep, index, {"model.norm": norm, "optimizer.lr": lr, "seed": str(seed)},
                         [final + 0.5, final])
                index += 1
    return sweep


def test_the_lr_tuned_verdicts_pair_seeds_correct_for_the_family_and_take_margin_and_effect(tmp_path: Path) -> None:
    from gptlab.report.family import holm
    from gptlab.report.stats import compare_paired

    depths = {"pre": 3.0, "post": 3.02, "mid": 3.0005}
    sweep = paired_lr_sweep(tmp_path, depths)
    text = write_sweep_report(sweep, margin=0.005, effect=0.002)[0].read_text()
    test = [4, 5, 6]  # held out: seeds 1-3 pick the best LR, 3e-3 for every variant
    finals = {n: [d + SHARED[s] + OWN[s] * {"pre": 1, "post": -1, "mid": 0.5}[n] for s in test]
              for n, d in depths.items()}
    comps = {n: compare_paired(finals["pre"], finals[n]) for n in ("post", "mid")}
    adjusted = dict(zip(comps, holm([c.p for c in comps.values()])))
    post, mid = verdict_line(text, "model.norm=post"), verdict_line(text, "model.norm=mid")
    assert "(95% CI, paired t, 3 seeds)" in post and f"(Holm {adjusted['post']:.3g})" in post
    assert ", significant;" in post and post.endswith("best LR 0.003")
    assert "; equivalent within ±0.005 (TOST p=" in mid and f"(Holm {adjusted['mid']:.3g})" in mid
    assert "- model.norm=post (test): paired: both arms ran seeds 4,5,6 with paired seeds" in text
    assert "Family: 2 variants tested against one baseline" in text and "## Ranking (2 variants" in text
    assert "seeds per arm for --effect 0.002" in text and "as many again pick each variant's best LR" in text
    welch = verdict_line(write_sweep_report(sweep, test="welch")[0].read_text(), "model.norm=post")
    assert "Welch, 3 vs 3 seeds" in welch and "no difference found" in welch  # the same runs, unpaired


def test_an_lr_tuned_arm_missing_a_seed_falls_back_to_welch_and_an_edge_stays_out_of_the_family(
        tmp_path: Path) -> None:
    sweep = paired_lr_sweep(tmp_path, {"pre": 3.0, "post": 3.02, "edge": 2.0}, {"edge": 1e-1})
    for job in sweep.iterdir():  # post's seed 6 never finished at any LR
        if "model.norm=post" in (job / ".hydra" / "overrides.yaml").read_text() and \
                "seed=6" in (job / ".hydra" / "overrides.yaml").read_text():
            (job / "run_summary.json").unlink()
    text = write_sweep_report(sweep)[0].read_text()
    assert "Welch, 2 vs 3 seeds" in verdict_line(text, "model.norm=post")
    assert "Welch: pairing impossible, seed 6 only in the baseline" in text
    assert "optimum at grid edge: widen the grid (no p-value)" in verdict_line(text, "model.norm=edge")
    assert "Holm" not in verdict_line(text, "model.norm=post") and "Family:" not in text  # post is tested alone
