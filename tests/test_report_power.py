"""What an ablation report's seeds and costs let it claim: fewer than 3 seeds in an arm is said to give the test
little power (one seed: no test at all), and a verdict at matched tokens marks a variant with more parameters or
FLOPs per token than the baseline (synthetic sweep dirs as train.py leaves them)."""

from __future__ import annotations

from pathlib import Path

from test_report_stats import MODEL, make_job, make_sweep, verdict_line

from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters, training_flops_per_token
from gptlab.report.runs import write_report
from gptlab.report.stats import compare


def row(text: str, label: str) -> list[str]:
    return next(r for r in text.splitlines() if r.startswith(f"| {label} |")).split(" | ")


def test_two_seeds_in_an_arm_say_the_test_has_little_power(tmp_path: Path) -> None:
    text = write_report(make_sweep(tmp_path, {"pre": [3.0, 3.02], "post": [3.5, 3.46]}))[0].read_text()
    line = verdict_line(text, "model.norm=post")
    assert "(95% CI, paired t, 2 seeds), p=" in line  # still tested: the p-value is shown, with what it can bear
    assert line.endswith("; little power: 2 seeds against the baseline's 2, fewer than 3 in an arm"), line
    assert row(text, "model.norm=post")[12].endswith("(little power: n<3)")
    assert "**Fewer than 3 seeds in an arm**: model.norm=pre (n=2), model.norm=post (n=2)." in text
    assert "With 2 seeds in an arm the test has little power" in text and "no test is possible" not in text


def test_one_arm_short_of_three_seeds_is_enough_for_the_note(tmp_path: Path) -> None:
    assert compare([3.0, 3.1, 3.05], [3.2, 3.3]).low_power and not compare([3.0, 3.1, 3.05], [3.2, 3.3, 3.1]).low_power
    text = write_report(make_sweep(tmp_path, {"pre": [3.0, 3.02, 2.99], "post": [3.5, 3.46]}))[0].read_text()
    assert "**Fewer than 3 seeds in an arm**: model.norm=post (n=2)." in text
    assert "little power: 2 seeds against the baseline's 3" in verdict_line(text, "model.norm=post")


def test_three_seeds_an_arm_carry_no_power_note(tmp_path: Path) -> None:
    text = write_report(make_sweep(tmp_path, {"pre": [3.0, 3.02, 2.99], "post": [3.5, 3.46, 3.52]}))[0].read_text()
    assert "little power" not in text and "Fewer than 3 seeds" not in text
    assert verdict_line(text, "model.norm=post").endswith(", significant")


def test_one_seed_says_no_test_is_possible(tmp_path: Path) -> None:
    text = write_report(make_sweep(tmp_path, {"pre": [3.0, 3.02], "post": [3.5]}))[0].read_text()
    assert verdict_line(text, "model.norm=post").endswith("one seed in an arm (n=1), no spread to test against: no "
                                                          "test possible")
    assert "model.norm=post (n=1)." in text and "With 1 seed no test is possible" in text


def test_an_untied_head_is_marked_as_the_variant_with_more_parameters(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for index, (tie, finals) in enumerate([("true", [3.0, 3.02, 2.99]), ("false", [2.9, 2.92, 2.91])]):
        for seed, final in enumerate(finals, start=1):
            make_job(sweep, 3 * index + seed, {"model.tie_weights": tie, "seed": str(seed)}, [final + 0.5, final],
                     model={"tie_weights": tie == "true"})
    tied, untied = (count_parameters(GPTConfig.for_tokenizer({**MODEL, "tie_weights": t}, 257))["total"]
                    for t in (True, False))
    assert untied > tied  # the premise: a separate W_head adds its weights
    flops = {training_flops_per_token(GPTConfig.for_tokenizer({**MODEL, "tie_weights": t}, 257))["total"]
             for t in (True, False)}
    text = write_report(sweep)[0].read_text()
    line = verdict_line(text, "model.tie_weights=false")
    more = (f"MORE PARAMETERS: {untied:,} against the baseline's {tied:,} (+{untied - tied:,}, "
            f"{(untied - tied) / tied:+.2%})")
    assert line.endswith(f", significant; {more}"), line
    assert ("MORE FLOPS PER TOKEN" in line) == (len(flops) > 1)
    assert row(text, "model.tie_weights=false")[7] == f"{untied:,} (+{untied - tied:,} over the baseline)"
    assert row(text, "model.tie_weights=true")[7] == f"{tied:,}"
    assert "Compared at matched tokens (every job trained on 512 tokens), not at matched FLOPs or parameters" in text
    flipped = write_report(sweep, baseline="model.tie_weights=false")[0].read_text()
    assert "; fewer parameters: " in verdict_line(flipped, "model.tie_weights=true") and "MORE PARAM" not in \
        verdict_line(flipped, "model.tie_weights=true")


def test_jobs_of_different_lengths_are_not_called_matched(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {"pre": [3.0, 3.02, 2.99]})
    for seed in (1, 2, 3):
        make_job(sweep, 10 + seed, {"experiment": "x", "model.norm": "post", "seed": str(seed)},
                 [3.6, 3.4, 3.3 + 0.01 * seed])
    text = write_report(sweep)[0].read_text()
    assert ("Not at matched tokens: the jobs trained on different or unrecorded numbers of tokens "
            "(model.norm=pre: 512; model.norm=post: 768)") in text
    assert "stages.batch_sizes trains" not in text  # what made them differ here: their steps
    assert "Compared at matched tokens" not in text
