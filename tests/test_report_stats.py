"""The ablation report's statistics: seeds grouped into variants, Welch's test and CI against a baseline, mean
curves with bands, and val/loss at matched FLOPs, on synthetic sweep dirs and one real tiny sweep."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import TINY, run_script, run_train
from matplotlib.collections import PolyCollection
from scipy import stats

from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.model.accounting import training_flops_per_token
from gptlab.report.plot import val_loss_figure
from gptlab.report.runs import group_variants, load_sweep, parse_baseline, write_report
from gptlab.report.stats import compare, mean_curve, value_at
from gptlab.runs.run_dir import STEPS_DONE_SUFFIX

MODEL = {"vocab_size": None, "block_size": 32, "n_layer": 1, "n_head": 2, "n_embd": 32}
TOKENS_PER_STEP = 128


def make_job(sweep: Path, index: int, overrides: dict[str, str], losses: list[float], steps: list[int] | None = None,
             model: dict | None = None, extra: dict | None = None, walltimes: list[float] | None = None,
             steps_done: bool = False, scalars: dict[str, list[tuple[int, float]]] | None = None) -> Path:
    """A finished job as train.py leaves it: summary, Hydra overrides, resolved config and val/loss events (and
    any other `scalars`, {tag: [(Lightning step, value)]}); by default as runs before gptlab.train.step_axis wrote
    them (Lightning's step, one behind the steps done)."""
    from torch.utils.tensorboard import SummaryWriter

    job = sweep / str(index)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"{k}={v}" for k, v in overrides.items()]))
    config = {"name": "synthetic", "seed": int(overrides.get("seed", 0)), "model": {**MODEL, **(model or {})},
              "tokenizer": {"_target_": "gptlab.data.tokenizers.ByteTokenizer"}}
    (job / "config_resolved.yaml").write_text(yaml.safe_dump(config))
    steps = steps or [2 * (i + 1) - (0 if steps_done else 1) for i in range(len(losses))]
    writer = SummaryWriter(log_dir=str(job / "tensorboard"), filename_suffix=STEPS_DONE_SUFFIX if steps_done else "")
    for i, (step, loss) in enumerate(zip(steps, losses)):
        writer.add_scalar("val/loss", loss, global_step=step, walltime=None if walltimes is None else walltimes[i])
    for tag, points in (scalars or {}).items():
        for step, value in points:
            writer.add_scalar(tag, value, global_step=step)
    writer.close()
    done = steps[-1] + (0 if steps_done else 1)
    summary = {"name": "synthetic", "parameters": 22016, "best_val_loss": min(losses), "final_val_loss": losses[-1],
               "global_step": done, "tokens_per_step": TOKENS_PER_STEP, "tokens_seen": done * TOKENS_PER_STEP,
               "fit_seconds": 1.0, "tokens_per_sec": 1000.0, **(extra or {})}
    (job / "run_summary.json").write_text(json.dumps(summary))
    return job


def make_sweep(tmp_path: Path, finals: dict[str, list[float]], key: str = "model.norm", **kwargs) -> Path:
    """Variant value -> one final val/loss per seed (each job's curve ends there)."""
    sweep = tmp_path / "sweep"
    index = 0
    for value, per_seed in finals.items():
        for seed, final in enumerate(per_seed, start=1):
            make_job(sweep, index, {"experiment": "x", key: value, "seed": str(seed)}, [final + 0.5, final], **kwargs)
            index += 1
    return sweep


def verdict_line(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"- {label}:"))


def test_identical_variants_are_not_significant(tmp_path: Path) -> None:
    seeds = [3.0, 3.02, 2.97]
    table, _ = write_report(make_sweep(tmp_path, {"pre": seeds, "post": seeds}))
    text = table.read_text()
    line = verdict_line(text, "model.norm=post")  # the same seeds, bit for bit: identical, not a Welch p of 1
    assert line.startswith("- model.norm=post: +0.000, the runs are identical") and "p=" not in line
    assert "Baseline: model.norm=pre" in text and "alpha = 0.05" in text and "Welch's t-test" in text
    row = next(r for r in text.splitlines() if r.startswith("| model.norm=post |"))
    assert "| 3 |" in row  # n: three seeds grouped into one variant


def test_separated_variants_are_significant(tmp_path: Path) -> None:
    table, _ = write_report(make_sweep(tmp_path, {"pre": [3.0, 3.01, 2.99], "post": [3.5, 3.51, 3.49]}))
    line = verdict_line(table.read_text(), "model.norm=post")
    assert line.endswith(", significant") and line.startswith("- model.norm=post: +0.500 ± ")
    assert float(line.split("p=")[1].split(",")[0]) < 0.01


def test_alpha_decides_significance(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.1, 2.9], "post": [3.15, 3.25, 3.05]})
    p = compare([3.0, 3.1, 2.9], [3.15, 3.25, 3.05]).p
    assert 0.01 < p < 0.2
    assert verdict_line(write_report(sweep, alpha=0.2)[0].read_text(), "model.norm=post").endswith(", significant")
    text = write_report(sweep, alpha=0.01)[0].read_text()
    assert verdict_line(text, "model.norm=post").endswith("no difference found (the interval spans 0)")
    assert "(99% CI)" in text


def test_one_seed_gets_no_test_and_the_report_still_works(tmp_path: Path) -> None:
    table, plot = write_report(make_sweep(tmp_path, {"pre": [3.0], "post": [3.2]}))
    text = table.read_text()
    assert verdict_line(text, "model.norm=post") == (
        "- model.norm=post: +0.200, one seed in an arm (n=1), no spread to test against: no test possible")
    row = next(r for r in text.splitlines() if r.startswith("| model.norm=post |"))
    # no p-value, a compute worth without an interval, no train/loss to judge
    assert "(n=1), no spread to test against: no test possible" in row
    assert row.endswith("| — | 0.758x (no interval) | — |")
    assert "p=" not in text and plot.stat().st_size > 0


def test_one_seed_on_the_baseline_side_only_is_no_test() -> None:
    comp = compare([3.0], [3.1, 3.2, 3.3])
    assert not comp.testable and comp.p is None and comp.ci_low is None and math.isclose(comp.diff, 0.2)


def test_ci_and_p_match_a_hand_computation() -> None:
    a, b = [3.0, 3.1, 3.05, 2.98], [3.2, 3.4, 3.3]
    va, vb = np.var(a, ddof=1), np.var(b, ddof=1)
    se2 = va / 4 + vb / 3
    dof = se2**2 / ((va / 4) ** 2 / 3 + (vb / 3) ** 2 / 2)
    half = stats.t.ppf(0.975, dof) * math.sqrt(se2)
    diff = np.mean(b) - np.mean(a)
    comp = compare(a, b)
    assert comp.dof == pytest.approx(dof) and comp.diff == pytest.approx(diff)
    assert (comp.ci_low, comp.ci_high) == (pytest.approx(diff - half), pytest.approx(diff + half))
    assert comp.p == pytest.approx(stats.ttest_ind(b, a, equal_var=False).pvalue)
    assert comp.significant == (comp.ci_low > 0)  # the CI and the test agree at the same alpha


def test_bpb_is_reported_when_the_summary_has_it(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for index, (best, final) in enumerate([(1.2, 1.3), (1.4, 1.5)]):
        make_job(sweep, index, {"model.norm": "pre", "seed": str(index + 1)}, [4.0, 3.0 + index / 10],
                 extra={"best_val_bpb": best, "final_val_bpb": final})
    make_job(sweep, 2, {"model.norm": "post", "seed": "1"}, [4.0, 3.2])
    text = write_report(sweep)[0].read_text()
    pre = next(r for r in text.splitlines() if r.startswith("| model.norm=pre |")).split(" | ")
    post = next(r for r in text.splitlines() if r.startswith("| model.norm=post |")).split(" | ")
    assert pre[4] == "1.3000 ± 0.1414" and pre[5] == "1.4000 ± 0.1414"
    assert post[4] == "—" and post[5] == "—"


def test_union_grid_interpolation_of_seeds_with_different_x() -> None:
    band = mean_curve([([0, 1, 2, 3], [4.0, 3.0, 2.0, 1.0]), ([0.5, 1.5, 2.5], [5.0, 4.0, 3.0])])
    assert band.x.tolist() == [0.5, 1, 1.5, 2, 2.5]  # the union, within the range both cover
    first = np.interp(band.x, [0, 1, 2, 3], [4.0, 3.0, 2.0, 1.0])
    second = np.interp(band.x, [0.5, 1.5, 2.5], [5.0, 4.0, 3.0])
    assert band.mean == pytest.approx((first + second) / 2)
    assert band.low == pytest.approx(np.minimum(first, second))
    assert band.high == pytest.approx(np.maximum(first, second))
    std = mean_curve([([0, 1], [1.0, 2.0]), ([0, 1], [3.0, 4.0])], band="std")
    assert std.low == pytest.approx([2 - math.sqrt(2), 3 - math.sqrt(2)])
    assert value_at(band, 3.0) is None  # no extrapolation past what every seed reached


def test_val_loss_at_matched_flops_against_a_hand_computation(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    small, big = {"n_embd": 32}, {"n_embd": 64}
    make_job(sweep, 0, {"model.n_embd": "32", "seed": "1"}, [4.0, 3.5, 3.2, 3.0], model=small)
    make_job(sweep, 1, {"model.n_embd": "64", "seed": "1"}, [3.9, 3.3, 3.0, 2.8], model=big)
    make_job(sweep, 2, {"model.n_embd": "64", "seed": "2"}, [3.7, 3.1, 2.8, 2.6], model=big)
    f_small = training_flops_per_token(GPTConfig.for_tokenizer(MODEL | small, 257))["total"]
    f_big = training_flops_per_token(GPTConfig.for_tokenizer(MODEL | big, 257))["total"]
    assert f_big > f_small
    tokens = np.array([2, 4, 6, 8]) * TOKENS_PER_STEP
    budget = tokens[-1] * f_small  # the small model's whole run; the big one got there early
    x_big = tokens * f_big
    k = int(np.searchsorted(x_big, budget))  # budget lies between the big model's points k-1 and k
    mean_big = np.array([3.8, 3.2, 2.9, 2.7])
    frac = (budget - x_big[k - 1]) / (x_big[k] - x_big[k - 1])
    expected = mean_big[k - 1] + frac * (mean_big[k] - mean_big[k - 1])

    text = write_report(sweep)[0].read_text()  # FLOPs per token differ: the x axis defaults to flops
    assert f"at {budget:.4g} training FLOPs" in text and "against training FLOPs" in text
    big_row = next(r for r in text.splitlines() if r.startswith("| model.n_embd=64 |")).split(" | ")
    small_row = next(r for r in text.splitlines() if r.startswith("| model.n_embd=32 |")).split(" | ")
    assert big_row[10] == f"{expected:.4f}" and small_row[10] == "3.0000"
    more = f"{f_big:,} (+{f_big - f_small:,} over the baseline)"  # the baseline: the small model
    assert big_row[9] == more and small_row[9] == f"{f_small:,}"
    assert "against tokens seen" in write_report(sweep, x="tokens")[0].read_text()


def test_plot_has_one_band_per_variant_with_seeds(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.1, 2.9], "post": [3.2, 3.3, 3.1], "none": [3.5]})
    variants = group_variants(load_sweep(sweep))
    assert [len(v.jobs) for v in variants] == [3, 3, 1]
    for band in ("minmax", "std"):
        fig = val_loss_figure(variants, "tokens", band)
        polys = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
        assert len(polys) == 2  # the one-seed variant has a line and no band
        assert len(fig.axes[0].get_lines()) == 3
    _, plot = write_report(sweep, band="std")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000


def test_seconds_axis_counts_from_the_jobs_first_event(tmp_path: Path) -> None:
    import time

    sweep = tmp_path / "sweep"
    start = time.time() + 1000  # later than the event file's own first event, written now
    make_job(sweep, 0, {"seed": "1"}, [4.0, 3.0], walltimes=[start + 10, start + 30])
    job = load_sweep(sweep)[0]
    seconds = job.x_values("seconds")
    assert seconds[1] - seconds[0] == pytest.approx(20, abs=0.01) and 999 < seconds[0] < 1020
    assert "against wall-clock seconds" in write_report(sweep, x="seconds")[0].read_text()


def test_baseline_flag_picks_the_variant_and_a_wrong_one_is_refused(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.01], "post": [3.5, 3.49]})
    text = write_report(sweep, baseline="model.norm=post")[0].read_text()
    assert "Baseline: model.norm=post (--baseline)" in text
    assert verdict_line(text, "model.norm=pre").startswith("- model.norm=pre: -0.490 ± ")
    listed = r"--baseline model.norm=rms matches no variant.*model.norm=pre; model.norm=post"
    with pytest.raises(ConfigError, match=listed):
        write_report(sweep, baseline="model.norm=rms")
    with pytest.raises(ConfigError, match="--baseline"):
        write_report(sweep, baseline="pre")
    assert parse_baseline("model.attn_pattern=[dense,local],model.norm=pre") == {
        "model.attn_pattern": "[dense,local]", "model.norm": "pre"}


def test_bad_options_and_dirs_are_config_errors(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0], "post": [3.1]})
    # --alpha's range is the scripts' parser's (tests/test_script_arguments.py), stated once
    with pytest.raises(ConfigError, match="--x"):
        write_report(sweep, x="steps")
    with pytest.raises(ConfigError, match="does not exist"):
        write_report(tmp_path / "nowhere")
    (sweep / "7").mkdir()  # a job that never finished
    assert "## Jobs without a finished run (left out)\n\n- 7: no run summary" in write_report(sweep)[0].read_text()


def test_old_run_without_resolved_config_still_reports(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.1], "post": [3.2, 3.3]})
    (sweep / "0" / "config_resolved.yaml").unlink()
    text = write_report(sweep)[0].read_text()
    assert "Parameters and FLOPs unknown for: 0" in text and "matched FLOPs: unavailable" in text
    with pytest.raises(ConfigError, match="--x flops"):
        write_report(sweep, x="flops")


def test_real_seed_sweep_of_ablate_norm_reports_per_variant(tmp_path: Path) -> None:
    """`-m experiment=ablate_norm seed=1,2,3` runs each norm under each seed; the script groups them."""
    args = ["-m", "experiment=ablate_norm", "seed=1,2,3", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=2",
            "callbacks.text_samples=null", "callbacks.stability_probes=null"]
    proc = run_train(args, cwd=tmp_path, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    sweep = next((tmp_path / "outputs" / "multiruns" / "ablate_norm").glob("*/*"))
    jobs = load_sweep(sweep)
    assert sorted((j.overrides["model.norm"], j.overrides["seed"]) for j in jobs) == [
        (n, s) for n in ("post", "pre") for s in ("1", "2", "3")]
    assert len({j.summary["final_val_loss"] for j in jobs}) > 1  # seeds really differ
    out = run_script("scripts/ablation_report.py", [str(sweep), "--baseline", "model.norm=pre", "--band", "std"],
                     check=True).stdout
    assert "Baseline: model.norm=pre (--baseline)" in out
    post = next(r for r in out.splitlines() if r.startswith("| model.norm=post |")).split(" | ")
    assert post[1] == "3" and "[" in post[11]  # three seeds, a CI
    line, cost = verdict_line(out, "model.norm=post").split("; fewer parameters: ")  # post-LN: no final norm
    # a real sweep runs paired seeds: the report pairs its arms seed by seed
    assert "(95% CI, paired t, 3 seeds), p=" in line
    assert line.endswith(", significant") or line.endswith("no difference found (the interval spans 0)")
    assert "; fewer FLOPs per token: " in cost and "little power" not in line
    assert (sweep / "val_loss.png").stat().st_size > 5000


def test_zero_variance_is_no_test_instead_of_p_zero(tmp_path: Path) -> None:
    comp = compare([3.0, 3.0], [3.183, 3.183])
    assert not comp.testable and not comp.significant and comp.no_test.startswith("zero variance")
    table, _ = write_report(make_sweep(tmp_path, {"pre": [3.0, 3.0], "post": [3.183, 3.183]}))
    text = table.read_text()
    assert verdict_line(text, "model.norm=post") == ("- model.norm=post: +0.183, zero variance (every seed gave the "
                                                     "same value on both sides: repeats of one run?): no test "
                                                     "possible")
    assert "p=" not in text and "significant" not in text.split("## Verdicts")[1].split("## Variants")[0]


def test_jobs_with_the_same_overrides_are_counted_once_with_a_warning(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for index, (norm, final) in enumerate([("pre", 3.0), ("pre", 3.0), ("post", 3.2), ("post", 3.2)]):
        make_job(sweep, index, {"model.norm": norm, "seed": "1"}, [final + 0.5, final])  # seed=1,1
    text = write_report(sweep)[0].read_text()
    assert "Warning: repeated runs are not independent seeds." in text
    assert "- job 1 repeats job 0 (model.norm=pre, seed=1): counted once" in text
    assert "- job 3 repeats job 2 (model.norm=post, seed=1): counted once" in text
    assert verdict_line(text, "model.norm=post") == (
        "- model.norm=post: +0.200, one seed in an arm (n=1), no spread to test against: no test possible")
    row = next(r for r in text.splitlines() if r.startswith("| model.norm=post |"))
    assert "| 1 |" in row  # n: the repeat is not a second seed


def test_val_steps_of_old_and_new_event_files_read_alike(tmp_path: Path) -> None:
    """Event files written before gptlab.train.step_axis hold Lightning's step, one behind the steps done; newer ones
    (named with STEPS_DONE_SUFFIX) hold the steps done. Both give the same tokens, also in one job resumed across
    the change (an old file, then a new one)."""
    from torch.utils.tensorboard import SummaryWriter

    old = make_job(tmp_path / "old", 0, {"seed": "1"}, [4.0, 3.0])  # at steps 1 and 3
    new = make_job(tmp_path / "new", 0, {"seed": "1"}, [4.0, 3.0], steps_done=True)  # at steps 2 and 4
    mixed = make_job(tmp_path / "mixed", 0, {"seed": "1"}, [4.0], steps=[1])  # step 1 of an old run, resumed:
    writer = SummaryWriter(log_dir=str(mixed / "tensorboard"), filename_suffix=STEPS_DONE_SUFFIX)
    writer.add_scalar("val/loss", 3.0, global_step=4)
    writer.close()
    for sweep in (old, new, mixed):
        job = load_sweep(sweep.parent)[0]
        assert job.x_values("tokens") == [2 * TOKENS_PER_STEP, 4 * TOKENS_PER_STEP], sweep
        assert [p.loss for p in job.val_curve] == [4.0, 3.0], sweep


def test_a_file_given_as_the_sweep_dir_is_named_a_file(tmp_path) -> None:
    """Issue 46 case: `ablation_report.py <run>/run_summary.json` said the (existing) file "does not exist"."""
    from gptlab.errors import ConfigError
    from gptlab.report.runs import load_sweep

    summary = tmp_path / "run_summary.json"
    summary.write_text("{}")
    with pytest.raises(ConfigError, match=rf"is a file, not a directory; .* \(this file's dir is {tmp_path}\)"):
        load_sweep(summary)
    with pytest.raises(ConfigError, match="does not exist"):
        load_sweep(tmp_path / "missing")
