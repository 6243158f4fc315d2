"""hydra/launcher=fused: a sweep's members trained as one vmapped step are each exactly their own run (issue 42)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import TINY, compose_config, load_checkpoint, run_train, scalars
from omegaconf import open_dict

import gptlab
from gptlab.errors import ConfigError
from gptlab.launch.fused_groups import plan_groups
from gptlab.report.runs import write_report
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE

FUSED = "hydra/launcher=fused"
QUIET = ["callbacks.text_samples=null", "callbacks.stability_probes=null"]
# AdamW and Muon, without and with accumulation: 4 members of one shape, each compared with its run alone.
SWEEP = [*TINY, *QUIET, "trainer.max_steps=24", "trainer.val_check_interval=8", "optimizer=adamw,muon",
         "trainer.accumulate_grad_batches=1,2", "optimizer.lr=3e-3"]
JOBS = ("0", "1", "2", "3")


def _sweep(root: Path, name: str, *extra: str) -> Path:
    proc = run_train(["-m", *SWEEP, *extra, f"hydra.sweep.dir={root / name}"], cwd=root, threads=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / name


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fused")
    return _sweep(root, "fused", FUSED), _sweep(root, "alone")


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-5 * abs(b)


def test_each_member_logs_what_its_run_alone_logs(sweeps) -> None:
    fused, alone = sweeps
    for job in JOBS:
        got, want = scalars(fused / job), scalars(alone / job)
        assert sorted(got) == sorted(want)
        for tag in ("train/loss", "val/loss", "train/lr", "train/grad_norm"):
            assert sorted(got[tag]) == sorted(want[tag]), (job, tag)
            bad = {s: (got[tag][s], v) for s, v in want[tag].items() if not _close(got[tag][s], v)}
            assert not bad, (job, tag, bad)
        assert max(want["val/loss"]) == 24 and max(want["train/loss"]) == 24


def test_each_member_writes_its_own_run_dir_and_checkpoint(sweeps) -> None:
    fused, alone = sweeps
    for job in JOBS:
        ours, theirs = fused / job, alone / job
        config = (ours / "config_resolved.yaml").read_text().replace(str(fused), "<sweep>")
        assert config == (theirs / "config_resolved.yaml").read_text().replace(str(alone), "<sweep>")
        summary = json.loads((ours / SUMMARY_FILE).read_text())
        assert summary["global_step"] == 24 and _close(summary["best_val_loss"],
                                                       json.loads((theirs / SUMMARY_FILE).read_text())["best_val_loss"])
        got, want = (load_checkpoint(d / "checkpoints" / "last.ckpt") for d in (ours, theirs))
        assert got["global_step"] == want["global_step"] == 24
        for key, value in want["state_dict"].items():
            torch.testing.assert_close(got["state_dict"][key], value, rtol=1e-5, atol=1e-6)
    model, _ = gptlab.load(fused / "0")  # what eval.py and sample.py read
    assert model.num_parameters() > 0


def _without_measured_speed(report: str) -> str:
    """The report with its tokens/s cells blanked: a member's own wall clock includes its wait for the others."""
    lines, column = [], None
    for line in report.splitlines():
        cells = line.split(" | ")
        if "tokens/s" in cells:
            column = cells.index("tokens/s")
        elif not line.startswith("|"):
            column = None
        elif column is not None and len(cells) > column:
            cells[column] = "-"
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def test_the_report_of_a_fused_sweep_is_the_report_of_the_sweep_alone(sweeps) -> None:
    """Same table, same verdicts: every number but the measured speed."""
    tables = [_without_measured_speed(write_report(sweep)[0].read_text().replace(str(sweep), "<sweep>"))
              for sweep in sweeps]
    assert "Welch" in tables[0] and tables[0] == tables[1]


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """Member 0 diverges at step 2 (z-loss 1e30 through unclipped SGD, as tests/test_sweep_failures.py), member 1 is
    refused for its own value, member 2 trains on."""
    root = tmp_path_factory.mktemp("fused_failing")
    args = ["-m", FUSED, *TINY, *QUIET, "trainer.max_steps=4", "trainer.val_check_interval=4",
            "nonfinite_check_every=1", "optimizer=sgd", "trainer.gradient_clip_val=null",
            "model.z_loss=1e30,-1.0,0.0", f"hydra.sweep.dir={root / 'sweep'}"]
    proc = run_train(args, cwd=root, threads=1)
    return root / "sweep", proc.returncode, proc.stderr


def test_a_failing_member_is_recorded_while_the_others_finish(failing) -> None:
    sweep, returncode, stderr = failing
    assert returncode == 1, stderr[-3000:]
    diverged = json.loads((sweep / "0" / FAILURE_FILE).read_text())
    refused = json.loads((sweep / "1" / FAILURE_FILE).read_text())
    assert diverged["kind"] == "diverged" and "train/loss is nan at step 2" in diverged["reason"]
    assert refused["kind"] == "config error"
    summary = json.loads((sweep / "2" / SUMMARY_FILE).read_text())
    assert summary["global_step"] == 4 and math.isfinite(summary["best_val_loss"])
    assert "Traceback" not in stderr


def _job(n: int, *overrides: str):
    cfg = compose_config([*TINY, *overrides])
    with open_dict(cfg):
        cfg.hydra = {"job": {"num": n, "override_dirname": ",".join(overrides)}, "overrides": {"task": list(overrides)}}
    return cfg


def test_jobs_group_by_shape_up_to_max_members_and_say_why_they_split() -> None:
    jobs = [_job(0, "seed=1"), _job(1, "model.norm=post"), _job(2, "seed=2", "optimizer.lr=1e-3"),
            _job(3, "seed=3", "model.z_loss=1e-4")]
    groups, differ = plan_groups(jobs, max_members=2)
    assert groups == [[0, 2], [3], [1]] and differ == ["model.norm"]


@pytest.mark.parametrize("override,says", [
    ("model.dropout=0.1", "set model.dropout=0"), ("trainer.devices=2", "set trainer.devices=1"),
    ("runtime.compile=true", "set runtime.compile=false")])
def test_what_cannot_fuse_is_one_line_naming_the_key(override: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        plan_groups([_job(0, override)], max_members=8)
    assert "or run the sweep without hydra/launcher=fused" in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_a_relaunch_continues_every_member_as_its_run_alone_continues(sweeps) -> None:
    """Raising trainer.max_steps in a relaunch continues each member from its own last.ckpt, in a group, to the
    steps the same job continued alone logs. Last in this file: it continues the shared sweeps in place."""
    fused, alone = sweeps
    for sweep, launcher in ((fused, [FUSED]), (alone, [])):
        proc = run_train(["-m", *SWEEP, *launcher, "trainer.max_steps=32", f"hydra.sweep.dir={sweep}"],
                         cwd=sweep.parent, threads=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
    for job in JOBS:
        got, want = scalars(fused / job), scalars(alone / job)
        assert max(want["train/loss"]) == 32
        for tag in ("train/loss", "val/loss"):
            assert all(_close(got[tag][s], v) for s, v in want[tag].items()), (job, tag)
