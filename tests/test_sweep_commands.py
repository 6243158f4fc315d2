"""A sweep is a multirun or nothing: a config carrying hydra.sweeper.params without -m is refused (it used to run
one job and drop the sweep), and a preempted sweep job's "Continue the sweep with:" command is the sweep launched again
into its dir."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from helpers import CONF_DIR, TINY, run_train
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import open_dict

from gptlab.errors import ConfigError, PreemptedError
from gptlab.launch.continuing import preempted_message
from gptlab.runs.sweep_jobs import check_sweep_is_multirun


def _with_hydra(overrides: list[str]):
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose("train", overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def test_an_experiments_sweep_without_multirun_is_refused(tmp_path: Path) -> None:
    done = run_train(["experiment=ablate_norm", f"hydra.run.dir={tmp_path / 'run'}", *TINY])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert ("gptlab: error: experiment=ablate_norm sweeps model.norm over pre,post (hydra.sweeper.params), which "
            "only a multirun launches") in done.stderr
    assert "Add -m" in done.stderr and "model.norm=pre" in done.stderr
    assert not (tmp_path / "run").exists()


def test_one_job_of_a_sweep_runs_when_its_swept_keys_are_pinned() -> None:
    check_sweep_is_multirun(_with_hydra(["experiment=ablate_gpt2_to_llama", "+rung=swiglu"]))  # docs/ladder.md
    check_sweep_is_multirun(_with_hydra(["experiment=ablate_norm", "model.norm=post"]))
    check_sweep_is_multirun(_with_hydra([]))
    with pytest.raises(ConfigError, match=r"sweeps \+rung over gpt2,rope"):
        check_sweep_is_multirun(_with_hydra(["experiment=ablate_gpt2_to_llama"]))


@pytest.mark.parametrize("recorded", [False, True], ids=["argv", "multirun.yaml"])
def test_a_preempted_sweep_jobs_continue_command_continues_the_sweep(monkeypatch, tmp_path: Path,
                                                                      recorded: bool) -> None:
    """The job's own `resume=auto hydra.run.dir=<job>` finished that job and never ran the rest (issue 46); with a
    sweeper's config (hparams_search=...) it started a new sweep. The line is the sweep again, into its dir, which
    skips the finished jobs and continues this one (docs/ablations.md); Hydra's multirun.yaml gives the sweep's
    overrides where it was written (a launcher whose job process has another command line)."""
    sweep = tmp_path / "sweep"
    job_dir = sweep / "seed=2"
    monkeypatch.setattr(sys, "argv", ["src/train.py", "-m", "seed=1,2,3", "trainer.max_steps=3"])
    if recorded:
        sweep.mkdir()
        (sweep / "multirun.yaml").write_text(  # exclude_keys: what hydra_callbacks.NameSweepJobs adds itself
            "hydra:\n  overrides:\n    hydra: [hydra.mode=MULTIRUN, hydra/launcher=basic, "
            "'hydra.job.config.override_dirname.exclude_keys=[trainer.max_steps]']\n"
            "    task: ['seed=1,2,3', trainer.max_steps=3]\n")
        monkeypatch.setattr(sys, "argv", ["src/train.py", "from-a-launcher"])
    cfg = _with_hydra(["seed=2", "trainer.max_steps=3"])  # the job's own overrides, as Hydra hands a job
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.sweep.dir = str(sweep)
    HydraConfig.instance().set_config(cfg)
    try:
        message = preempted_message(PreemptedError(15, 3, job_dir / "checkpoints" / "preempted.ckpt"))
    finally:
        HydraConfig.instance().cfg = None
    assert "Continue the sweep with: " in message and "resume=auto" not in message, message
    args = shlex.split(message.split("Continue the sweep with: ", 1)[1])[2:]  # the rest of the line, as copied
    launcher = ["hydra/launcher=basic"] if recorded else []
    assert args == ["-m", *launcher, "seed=1,2,3", "trainer.max_steps=3", f"hydra.sweep.dir={sweep.resolve()}"]
