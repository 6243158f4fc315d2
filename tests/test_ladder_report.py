"""The scaling-ladder report from sweep dirs (synthetic jobs drawn from a known law), and the ladder experiment's
token rule."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import compose_config, run_script
from test_report_stats import MODEL, TOKENS_PER_STEP, make_job

from gptlab.config.ladder_steps import non_embedding_parameters
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters, training_flops_per_token
from gptlab.report.ladder_fit import PowerLaw
from gptlab.report.sweep import write_sweep_report

SIZES = {"w16": (1, 16), "w24": (1, 24), "w32": (2, 32), "w48": (2, 48)}
STEPS = {"w16": 20, "w24": 60, "w32": 200, "w48": 600}  # a growing token budget, as the ladder rule gives


def synthetic_ladder(tmp_path: Path, multiplier: float, sizes: dict = SIZES) -> Path:
    """Variant `llama` reaches at compute C the loss `gpt2` reaches at multiplier × C."""
    sweep, index = tmp_path / "sweep", 0
    law = PowerLaw(e=1.5, a=2.5, alpha=0.3, c_ref=1e9)
    rng = np.random.default_rng(0)
    for rung, m in (("gpt2", 1.0), ("llama", multiplier)):
        for size, (layers, width) in sizes.items():
            model = {"n_layer": layers, "n_embd": width}
            flops = training_flops_per_token(GPTConfig.for_tokenizer({**MODEL, **model}, 257))["total"]
            compute = STEPS[size] * TOKENS_PER_STEP * flops
            for seed in (1, 2, 3):
                final = float(law.loss(m * compute)) + 0.003 * rng.standard_normal()
                make_job(tmp_path / "sweep", index, {"+rung": rung, "+ladder": size, "seed": str(seed)},
                         [final + 0.3, final], steps=[STEPS[size] // 2 - 1, STEPS[size] - 1], model=model)
                index += 1
    return sweep


def test_ladder_sweep_gets_fits_and_multipliers_with_intervals(tmp_path: Path) -> None:
    sweep = synthetic_ladder(tmp_path, 2.0)
    out = run_script("scripts/ablation_report.py", [str(sweep), "--baseline", "+rung=gpt2", "--boot", "200"],
                     check=True).stdout
    assert "24 jobs: 2 variants × sizes w16, w24, w32, w48 (+ladder) × seeds 1, 2, 3" in out
    rows = [r.split(" | ") for r in out.splitlines() if r.startswith("| +rung=llama | ")]
    multipliers = [r for r in rows if r[-1].startswith("[")]
    assert [r[1] for r in multipliers] == ["w16", "w24", "w32", "w48", "target"]
    for row in multipliers:
        point = float(row[3].rstrip("x"))
        low, high = (float(v.rstrip("x")) for v in re.findall(r"[\d.]+x", row[4]))
        assert low <= 2.0 <= high and 1.5 < point < 2.7, row
    assert "(10x the largest rung" in out and "— EXTRAPOLATED" not in out
    assert (sweep / "scaling_ladder.png").stat().st_size > 5000
    largest = max(float(r[4]) for r in rows if len(r) == 7)
    far = write_sweep_report(sweep, baseline="+rung=gpt2", target_flops=30 * largest, n_boot=50)[0].read_text()
    assert "target — EXTRAPOLATED 30x beyond the largest rung (more than 10x)" in far


def test_a_ladder_needs_three_sizes(tmp_path: Path) -> None:
    sweep = synthetic_ladder(tmp_path, 1.0, {k: SIZES[k] for k in ("w16", "w24")})
    with pytest.raises(ConfigError, match="at least 3 sizes"):
        write_sweep_report(sweep, n_boot=20)


@pytest.mark.parametrize("size", ["w16", "w48"])
def test_ladder_experiment_trains_each_size_on_its_tokens_per_parameter(size: str, tmp_path: Path) -> None:
    cfg = compose_config(["experiment=ladder_gpt2_to_llama", f"+ladder={size}", "+rung=untied"], tmp_path)
    model = {**cfg.model, "vocab_size": 257}
    n = non_embedding_parameters(model, 257)
    counts = count_parameters(GPTConfig.for_tokenizer(model, 257))
    assert n == counts["total"] - counts["embedding"] - counts["head"]  # untied head left out of N
    per_step = cfg.data.batch_size * cfg.model.block_size
    assert cfg.trainer.max_steps == math.ceil(20 * n / per_step)
    assert cfg.trainer.val_check_interval == cfg.trainer.max_steps  # one validation, at the end
    with pytest.raises(Exception, match="ladder_tokens_per_param=-1(\\.0)? is invalid: use a number in \\(0, inf\\)"):
        _ = compose_config(["experiment=ladder_gpt2_to_llama", f"+ladder={size}", "ladder_tokens_per_param=-1"],
                           tmp_path).trainer.max_steps  # the schema's own range, checked by the resolver too
    with pytest.raises(Exception, match="ladder_tokens_per_param=null, but trainer.max_steps is computed from it"):
        _ = compose_config(["experiment=ladder_gpt2_to_llama", f"+ladder={size}", "ladder_tokens_per_param=null"],
                           tmp_path).trainer.max_steps
