"""hydra/launcher=ray on a Ray instance started on this machine (2 CPUs): a 2-job sweep, one job refused for its own
value, behaves as with the basic launcher (tests/test_sweep_failures.py): its dirs, records, the failure recorded
in its job dir and named at the end, and a relaunch that skips both jobs and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TINY, run_train

from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE, SWEEP_CONFIG

pytest.importorskip("ray", reason="hydra/launcher=ray's test needs the ray package (the test extra installs it)")


def _args(sweep: Path) -> list[str]:
    return ["-m", *TINY, "hydra/launcher=ray", "+hydra.launcher.init={num_cpus:2,include_dashboard:false}",
            "trainer.max_steps=2", "trainer.val_check_interval=2", "callbacks.text_samples=null",
            "callbacks.stability_probes=null", "model.z_loss=0.0,-1.0", f"hydra.sweep.dir={sweep}"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    root = tmp_path_factory.mktemp("ray_sweep")
    proc = run_train(_args(root / "sweep"), cwd=root, threads=1)
    return root / "sweep", proc.returncode, proc.stderr


def test_each_job_runs_in_its_own_dir_and_the_failure_is_recorded_and_named(sweep) -> None:
    sweep_dir, returncode, stderr = sweep
    assert returncode == 1, stderr[-3000:]  # a job failed: said at the end, after every job ran
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    assert json.loads((sweep_dir / SWEEP_CONFIG).read_text())["config"]  # the relaunch's record
    assert (sweep_dir / "0" / SUMMARY_FILE).is_file() and not (sweep_dir / "0" / FAILURE_FILE).exists()
    assert [p.name for p in (sweep_dir / "0" / "tensorboard").iterdir()] == ["model.z_loss=0.0"]
    refused = json.loads((sweep_dir / "1" / FAILURE_FILE).read_text())
    assert refused["kind"] == "config error" and "model.z_loss=-1.0 must be a number >= 0" in refused["reason"]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("gptlab: 1 of 2 sweep jobs failed, the others ran: job 1 (model.z_loss=-1.0): "), last
    assert "Traceback" not in stderr


def test_a_relaunch_skips_the_finished_and_the_failed_job_and_says_so(sweep) -> None:
    sweep_dir, _, _ = sweep
    kept = {p: p.stat().st_mtime_ns for p in [sweep_dir / "0" / SUMMARY_FILE, sweep_dir / "1" / FAILURE_FILE]}
    proc = run_train(_args(sweep_dir), cwd=sweep_dir.parent, threads=1)
    assert proc.returncode == 1, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "already finished" in output and "failed in an earlier launch" in output
    assert "delete its failed.json to run it again" in output
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # nothing trained again


def test_a_local_instance_runs_its_jobs_at_nice_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray starts its workers at nice 15: on a busy machine this test's own 2-job sweep got 1.6% of a CPU for 7
    minutes. The raylet that a local ray.init starts reads RAY_worker_niceness from the environment."""
    import os

    import ray

    from gptlab.launch.ray_launcher import RAY_NICENESS_ENV, RayLauncher

    seen: dict[str, str] = {}
    monkeypatch.delenv(RAY_NICENESS_ENV, raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(os.environ))
    assert RayLauncher()._connect()
    assert seen[RAY_NICENESS_ENV] == "0"
    seen.clear()
    monkeypatch.delenv(RAY_NICENESS_ENV)
    RayLauncher(address="auto")._connect()  # a cluster's workers are the cluster's to set
    assert RAY_NICENESS_ENV not in seen
