"""A sweep launched again into its sweep dir skips its finished jobs and continues the others from their
checkpoints; each job's TensorBoard run is named by the overrides that differ between the jobs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import TINY, compose_tiny, run_train, scalars
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

from gptlab.runs.run_dir import event_files


def _sweep_args(sweep: Path, marker: Path) -> list[str]:
    """2 jobs of 4 steps (validation and checkpoints at step 2); job 1 is killed at step 3 the first time."""
    return ["-m", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", "model.norm=pre,post",
            "callbacks.text_samples=null", "callbacks.stability_probes=null",
            "+callbacks.kill._target_=helpers.KillSweepJobOnce", "+callbacks.kill.job=1", "+callbacks.kill.step=3",
            f"+callbacks.kill.marker={marker}", f"hydra.sweep.dir={sweep}"]


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The sweep after its first launch: job 0 finished, job 1 killed at step 3 (checkpoints of step 2 on disk)."""
    root = tmp_path_factory.mktemp("sweep")
    args = _sweep_args(root / "sweep", root / "killed")
    proc = run_train(args, cwd=root, threads=1)
    assert proc.returncode == -9, proc.stderr[-3000:]  # SIGKILLed in job 1
    return root / "sweep", args


def test_tensorboard_names_sweep_jobs_by_their_differing_overrides(killed_sweep: tuple[Path, list[str]]) -> None:
    sweep, _ = killed_sweep
    # What TensorBoard lists as runs for `--logdir <sweep dir>`: each events dir relative to the logdir.
    runs = EventMultiplexer().AddRunsFromDirectory(str(sweep)).Runs()
    assert sorted(runs) == ["0/tensorboard/model.norm=pre", "1/tensorboard/model.norm=post"]
    assert "val/loss" in scalars(sweep / "0")  # the shared reader finds them one level deeper


def test_relaunched_sweep_skips_finished_jobs_and_continues_the_others(killed_sweep: tuple[Path, list[str]]) -> None:
    sweep, args = killed_sweep
    assert not (sweep / "1" / "run_summary.json").exists()
    files0 = [*(sweep / "0" / "checkpoints").iterdir(), sweep / "0" / "run_summary.json", *event_files(sweep / "0")]
    job0 = {p: p.stat().st_mtime_ns for p in files0}
    summary0 = json.loads((sweep / "0" / "run_summary.json").read_text())
    events1 = set(event_files(sweep / "1"))

    proc = run_train(args, cwd=sweep.parent, threads=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert output.count("already finished") == 1 and "skipped" in output  # one line, for job 0
    assert {p: p.stat().st_mtime_ns for p in job0} == job0  # job 0 untouched: not trained again
    assert len(event_files(sweep / "0")) == 1

    log1 = (sweep / "1" / "train.log").read_text()
    assert "continuing from" in log1 and "checkpoints/" in log1
    summary1 = json.loads((sweep / "1" / "run_summary.json").read_text())
    assert summary1["global_step"] == 4 and summary1["best_val_loss"] is not None
    (new_events,) = set(event_files(sweep / "1")) - events1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(new_events))
    acc.Reload()
    # Continued from the step-2 checkpoint: no step before it trained again (step 2 is the checkpoint's own last
    # logged step, logged once more on resume), steps 3 and 4 are new.
    assert sorted(e.step for e in acc.Scalars("train/loss")) == [2, 3, 4]
    assert json.loads((sweep / "0" / "run_summary.json").read_text()) == summary0
    shutil.rmtree(sweep)


def test_a_finished_job_returns_its_recorded_best_and_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    from gptlab.apps.train import train

    monkeypatch.setattr("gptlab.runs.sweep_jobs.in_sweep_job", lambda: True)
    (tmp_path / "run_summary.json").write_text(json.dumps({"global_step": 6, "best_val_loss": 1.25}))
    assert train(compose_tiny(tmp_path, "trainer.max_steps=6")) == 1.25  # what the sweeper gets
    assert [p.name for p in tmp_path.iterdir()] == ["run_summary.json"]


def test_a_job_launched_with_more_steps_is_not_finished(tmp_path: Path, monkeypatch) -> None:
    from gptlab.runs.sweep_jobs import finished_sweep_job

    monkeypatch.setattr("gptlab.runs.sweep_jobs.in_sweep_job", lambda: True)
    (tmp_path / "run_summary.json").write_text(json.dumps({"global_step": 6, "best_val_loss": 1.25}))
    assert finished_sweep_job(compose_tiny(tmp_path, "trainer.max_steps=6"), tmp_path) is not None
    assert finished_sweep_job(compose_tiny(tmp_path, "trainer.max_steps=12"), tmp_path) is None


def test_another_sweep_into_the_same_dir_is_refused_naming_what_differs(tmp_path: Path, monkeypatch) -> None:
    from omegaconf import OmegaConf

    from gptlab.errors import ConfigError
    from gptlab.runs.run_dir import RESOLVED_CONFIG
    from gptlab.runs.sweep_jobs import check_same_sweep_job

    before = compose_tiny(tmp_path, "model.norm=pre", "trainer.max_steps=6")
    (tmp_path / RESOLVED_CONFIG).write_text(OmegaConf.to_yaml(before, resolve=True))
    check_same_sweep_job(compose_tiny(tmp_path, "model.norm=pre", "trainer.max_steps=12"), tmp_path)  # more steps
    with pytest.raises(ConfigError, match=r"model\.norm: 'pre' -> 'post'"):
        check_same_sweep_job(compose_tiny(tmp_path, "model.norm=post", "trainer.max_steps=6"), tmp_path)
