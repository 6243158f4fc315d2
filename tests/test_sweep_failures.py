"""A sweep goes on past a job that diverges or is refused for its own values: each failure is recorded in its job
dir and listed by the report, the sweep exits 1 at the end naming them, a relaunch skips them, and a relaunch with
another config is refused before it writes anything."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from helpers import TINY, run_train

from gptlab.report.runs import write_report
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE

# Job 0 diverges at step 2 (a z-loss of 1e30 through unclipped SGD overflows the weights: plain fp32 arithmetic, the
# same on every CPU, where an attention scale of 1e30 is absorbed by some SDPA kernels), job 1 is refused (a negative
# z-loss), job 2 trains.
SCALES = "model.z_loss=1e30,-1.0,0.0"
DIVERGE = ["optimizer=sgd", "trainer.gradient_clip_val=null"]


def _args(sweep: Path, *extra: str) -> list[str]:
    return ["-m", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "nonfinite_check_every=1",
            "callbacks.text_samples=null", "callbacks.stability_probes=null", *DIVERGE, SCALES,
            f"hydra.sweep.dir={sweep}", *extra]


def _snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` by its bytes' hash."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    root = tmp_path_factory.mktemp("failing_sweep")
    proc = run_train(_args(root / "sweep"), cwd=root, threads=1)
    return root / "sweep", proc.returncode, proc.stderr


def test_every_job_runs_and_the_failures_are_recorded_with_their_reasons(sweep) -> None:
    sweep_dir, returncode, stderr = sweep
    assert returncode == 1, stderr[-3000:]  # some jobs failed: said at the end, after every job ran
    diverged = json.loads((sweep_dir / "0" / FAILURE_FILE).read_text())
    refused = json.loads((sweep_dir / "1" / FAILURE_FILE).read_text())
    assert diverged["kind"] == "diverged" and "train/loss is nan at step 2" in diverged["reason"]
    assert diverged["overrides"] == "model.z_loss=1e+30"
    assert refused["kind"] == "config error" and "model.z_loss=-1.0 must be a number >= 0" in refused["reason"]
    assert (sweep_dir / "2" / SUMMARY_FILE).is_file() and not (sweep_dir / "2" / FAILURE_FILE).exists()
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("gptlab: 2 of 3 sweep jobs failed, the others ran: job 0 (model.z_loss=1e+30): "
                           "train/loss is nan at step 2"), last
    assert "job 1 (model.z_loss=-1.0): model.z_loss=-1.0 must be a number >= 0" in last
    assert "Traceback" not in stderr


def test_the_report_lists_the_failed_jobs_with_their_reasons(sweep) -> None:
    sweep_dir, _, _ = sweep
    table, _ = write_report(sweep_dir)
    text = table.read_text()
    failed = text.split("## Failed jobs (left out)\n\n", 1)[1]
    assert failed.startswith("- 0 (model.z_loss=1e+30): diverged: train/loss is nan at step 2")
    assert "- 1 (model.z_loss=-1.0): config error: model.z_loss=-1.0 must be a number >= 0" in failed
    assert "Jobs without a finished run" not in text  # failed is not "missing"
    assert "\n| 2 |" in text  # the job that trained is reported


def test_a_relaunch_with_another_config_is_refused_before_writing_anything(sweep) -> None:
    sweep_dir, _, _ = sweep
    before = _snapshot(sweep_dir)
    proc = run_train(_args(sweep_dir, "optimizer.lr=0.002"), cwd=sweep_dir.parent, threads=1)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert (f"gptlab: error: hydra.sweep.dir='{sweep_dir}' holds another sweep (optimizer.lr: 0.1 -> 0.002); "
            "nothing was written.") in proc.stderr
    assert _snapshot(sweep_dir) == before  # every file byte-identical, none added: job 0's labels stay its own

    proc = run_train(_args(sweep_dir, "model.z_loss=1e30,0.0"), cwd=sweep_dir.parent, threads=1)
    assert proc.returncode == 2 and "model.z_loss (swept): 'model.z_loss=1e30,-1.0,0.0' -> " in proc.stderr
    assert _snapshot(sweep_dir) == before


def test_a_relaunch_of_the_same_sweep_skips_failed_and_finished_jobs_and_says_so_again(sweep) -> None:
    sweep_dir, _, _ = sweep
    kept = {p: p.stat().st_mtime_ns for p in [sweep_dir / "0" / FAILURE_FILE, sweep_dir / "1" / FAILURE_FILE,
                                              sweep_dir / "2" / SUMMARY_FILE]}
    proc = run_train(_args(sweep_dir), cwd=sweep_dir.parent, threads=1)
    assert proc.returncode == 1, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert output.count("failed in an earlier launch") == 2 and "delete its failed.json to run it again" in output
    assert "gptlab: 2 of 3 sweep jobs failed" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # nothing trained again


def test_a_single_run_keeps_its_exit_codes(tmp_path: Path) -> None:
    diverged = run_train([*TINY, "trainer.max_steps=2", "nonfinite_check_every=1", "model.z_loss=1e30", *DIVERGE,
                          f"hydra.run.dir={tmp_path / 'a'}"], cwd=tmp_path, threads=1)
    assert diverged.returncode == 1 and "gptlab: training stopped: train/loss is nan" in diverged.stderr
    refused = run_train([*TINY, "model.z_loss=-1.0", f"hydra.run.dir={tmp_path / 'b'}"], cwd=tmp_path)
    assert refused.returncode == 2 and "gptlab: error: model.z_loss=-1.0" in refused.stderr
    assert not (tmp_path / "a" / FAILURE_FILE).exists()  # a record only for sweep jobs


@pytest.mark.parametrize("swept", ["seed=1,1", "model.norm=pre,post,pre"])
def test_a_sweep_repeating_a_value_is_refused_before_anything_is_written(tmp_path: Path, swept: str) -> None:
    proc = run_train(["-m", *TINY, swept, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"gptlab: error: {swept} gives " in proc.stderr and "more than once" in proc.stderr
    assert list(tmp_path.iterdir()) == []
