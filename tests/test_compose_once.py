"""A sweep composes each job's config once (gptlab.launch.compose_once): Hydra's basic sweeper composed every job
to check it and the launcher composed it again to run it. Train's own config and Hydra callbacks, with a task that
only records the config it got, so that what is counted is Hydra's composes and nothing else."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from helpers import CHECKOUT_ENV, CONF_DIR, HANG_GUARD_S

from gptlab.launch.compose_once import ComposedOnce

# train.py's entry with a task that records each job's seed and model, counting Hydra's composes of a job's config
SWEEP = f"""
import json, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from gptlab.config.entry import main

composes, jobs = [], []
compose = ConfigLoaderImpl.load_sweep_config
def counted(self, master_config, sweep_overrides):
    composes.append(list(sweep_overrides))
    return compose(self, master_config, sweep_overrides)
ConfigLoaderImpl.load_sweep_config = counted

@main(config_name="train", config_path={str(CONF_DIR)!r})
def task(cfg):
    jobs.append([cfg.seed, cfg.model.n_layer])
    return 0.0

try:
    task()
finally:
    print(json.dumps({{"composes": composes, "jobs": jobs}}))
"""


def sweep(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run([sys.executable, "-c", SWEEP, "-m", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, env=CHECKOUT_ENV, capture_output=True, text=True, timeout=HANG_GUARD_S)
    return done, json.loads(done.stdout.strip().splitlines()[-1])


def test_each_job_is_composed_once_and_gets_its_own_config(tmp_path: Path) -> None:
    done, seen = sweep(["seed=1,2,3", "model.n_layer=1,2"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(seen["jobs"]) == [[s, n] for s in (1, 2, 3) for n in (1, 2)]
    assert len(seen["composes"]) == 6 and len({tuple(c) for c in seen["composes"]}) == 6  # was 12: each twice


def test_a_job_that_cannot_be_composed_stops_the_batch_before_any_job_runs(tmp_path: Path) -> None:
    done, seen = sweep(["model=nano,no_such_model"], tmp_path)
    assert done.returncode == 2 and seen["jobs"] == [], done.stderr[-3000:]
    assert "no_such_model" in done.stderr


class Loader:
    """A stand-in for Hydra's config loader: counts composes, each a new object."""

    def __init__(self) -> None:
        self.calls = 0

    def load_sweep_config(self, master_config, sweep_overrides):
        self.calls += 1
        return {"job": list(sweep_overrides), "compose": self.calls}


def test_a_config_is_handed_on_once_and_never_across_processes() -> None:
    loader = ComposedOnce(Loader())
    checked = loader.load_sweep_config(None, ["seed=1"])
    assert loader.load_sweep_config(None, ["seed=1"]) is checked  # the launcher's compose: the checked copy
    assert loader.load_sweep_config(None, ["seed=1"]) is not checked  # a third: composed anew
    loader.load_sweep_config(None, ["seed=2"])
    shipped = pickle.loads(pickle.dumps(loader))  # a Ray worker's copy composes its own job
    assert shipped.composed == {} and shipped.loader.calls == 3
    assert loader.composed  # the launching process keeps its own
