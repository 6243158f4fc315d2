"""The context report's verdicts are the ablation report's (report.verdicts): on synthetic scored sweeps with a known
truth, seeds pair where both arms were scored on them, Holm spans the variants, --margin and --effect answer, and a
seed scored in one arm only falls back to Welch's test and says so."""

from __future__ import annotations

import json
from pathlib import Path

from test_report_stats import make_job, verdict_line

from gptlab.eval.context_results import PROTOCOL, RESULTS_FILE
from gptlab.report.context_report import write_context_report
from gptlab.report.family import holm
from gptlab.report.stats import compare_paired

SHARED = [0.04, -0.03, 0.01, -0.02, 0.0]  # a seed's effect on every variant's loss at 64 (paired seeds)
OWN = [0.0004, -0.0003, 0.0001, 0.0002, -0.0004]


def scored_sweep(tmp_path: Path, shifts: dict[str, float], skip: tuple[str, int] | None = None) -> Path:
    """Variant -> its true difference at context 64 from `rope`; each job scored at 32 (trained) and 64."""
    sweep, index = tmp_path / "sweep", 0
    for value, shift in shifts.items():
        for seed, (common, own) in enumerate(zip(SHARED, OWN), start=1):
            job = make_job(sweep, index, {"model.pos_emb": value, "seed": str(seed)}, [3.5, 3.0])
            index += 1
            if (value, seed) == skip:
                continue
            at = {32: 3.0 + common, 64: 3.1 + shift + common + own * (1 if value == "rope" else -1)}
            record = {"trained_context": 32, "protocol": PROTOCOL, "scored_targets": 4096,
                      "contexts": {str(c): {"loss": v} for c, v in at.items()},
                      "loss_by_position": {str(c): [v] * c for c, v in at.items()}}
            (job / RESULTS_FILE).write_text(json.dumps(record))
    return sweep


def losses(shift: float, sign: int) -> list[float]:
    return [3.1 + shift + c + o * sign for c, o in zip(SHARED, OWN)]


def test_the_context_report_pairs_seeds_corrects_for_the_family_and_takes_margin_and_effect(tmp_path: Path) -> None:
    shifts = {"rope": 0.0, "alibi": -0.02, "nope": 0.0005}
    text = write_context_report(scored_sweep(tmp_path, shifts), 64, margin=0.005, effect=0.002)[0].read_text()
    comps = {v: compare_paired(losses(0.0, 1), losses(shifts[v], -1)) for v in ("alibi", "nope")}
    adjusted = dict(zip(comps, holm([c.p for c in comps.values()])))
    alibi, nope = verdict_line(text, "model.pos_emb=alibi"), verdict_line(text, "model.pos_emb=nope")
    assert "(95% CI, paired t, 5 seeds)" in alibi and f"(Holm {adjusted['alibi']:.3g})" in alibi
    assert ", significant" in alibi and "not equivalent: beyond ±0.005" in alibi
    assert "equivalent within ±0.005 (TOST p=" in nope and f"(Holm {adjusted['nope']:.3g})" in nope
    assert "- model.pos_emb=alibi (test): paired: both arms ran seeds 1,2,3,4,5 with paired seeds" in text
    assert "Seed sigma of loss at context 64, pooled over the arms" in text
    assert "seeds per arm for --effect 0.002" in text and "| Δ loss at context 64 |" in text


def test_a_seed_scored_in_one_arm_only_gets_welch(tmp_path: Path) -> None:
    text = write_context_report(scored_sweep(tmp_path, {"rope": 0.0, "alibi": -0.02}, skip=("alibi", 5)), 64)[0]
    text = text.read_text()
    assert "Welch, 4 vs 5 seeds" in verdict_line(text, "model.pos_emb=alibi")
    assert "Welch: pairing impossible, seed 5 only in the baseline" in text
