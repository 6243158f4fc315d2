"""One SQLite store written by several jobs at once under a campaign: `-m campaign=c logger=mlflow` with
hydra/launcher=local_gpus (three processes at once, on fake GPU ids: the local form of a SLURM array's jobs, each its
own process; three is enough to race, and each costs a process start) and hydra/launcher=fused (eight members,
threads of one process). Every job streams its scalars into
the store (logger=mlflow) while the others do, and the launching process records them all in the campaign's ledger
at the end; the rows are counted: nothing is lost, nothing is doubled."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY, run_train
from test_campaign_ledger import in_child, sweep

from gptlab.campaign import actions, ledger

STEPS = ["trainer.max_steps=3", "trainer.val_check_interval=3", "callbacks.text_samples=null"]
JOBS = {"local_gpus": 3, "fused": 8}


def launcher_overrides(launcher: str, jobs: int) -> list[str]:
    if launcher == "fused":
        return ["hydra/launcher=fused", f"hydra.launcher.max_members={jobs}"]
    return ["hydra/launcher=local_gpus", f"hydra.launcher.device_ids=[{','.join(map(str, range(jobs)))}]",
            "hydra.launcher.poll_s=0.2"]


@pytest.mark.parametrize("launcher", sorted(JOBS))
def test_jobs_at_once_write_one_store_and_lose_nothing(launcher: str, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    jobs = JOBS[launcher]
    seeds = list(range(1, jobs + 1))

    uri = f"sqlite:///{tmp_path}/outputs/mlflow.db"
    # the baseline's config but model.norm, as a sweep's overrides.yaml holds it (the sweeper writes false as False)
    tiny = {k: {"false": "False"}.get(v, v) for k, v in (o.split("=", 1) for o in [*TINY, *STEPS])}
    base = sweep(tmp_path, "base", {**tiny, "model.norm": "pre"}, [3.0 + 0.01 * s for s in range(jobs)],
                 seeds=seeds)
    assert in_child(actions.start, uri, "c", base, 0.05, None, None) == 0
    proc = run_train(["-m", *TINY, *STEPS, "logger=mlflow", "campaign=c", "model.norm=post",
                      f"seed={','.join(map(str, seeds))}", *launcher_overrides(launcher, jobs),
                      f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    campaign = ledger.load(uri, "c")
    runs = [r for r in campaign.of("run") if r.tag("variant") == "model.norm=post"]  # logger=: a setting
    assert sorted(int(r.tag("seed")) for r in runs) == seeds and campaign.half_written == 0
    assert [v.tag("variant") for v in campaign.of("verdict")] == ["model.norm=post"]
    # the loggers' runs, streamed at once into the same file: one per job, each with its val/loss and hparams
    client = MlflowClient(uri)
    logged = client.search_runs([e.experiment_id for e in client.search_experiments() if e.name != "c"])
    assert sorted(int(r.data.params["seed"]) for r in logged) == seeds
    for run in logged:
        assert run.info.status == "FINISHED" and [m.step for m in client.get_metric_history(
            run.info.run_id, "val/loss")] == [3]
