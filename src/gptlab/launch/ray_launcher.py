"""hydra/launcher=ray: a `-m` sweep's jobs as Ray tasks, on an existing Ray cluster (`address`) or on a Ray instance
started on this machine; each job takes `num_cpus` and `num_gpus` of the cluster, and Ray runs as many at once as
fit.

Each task does what Hydra's basic launcher does for a job (the sweep config of its overrides, then run_job into
<sweep dir>/<job number>), so a job's dir, its records, its failure (failed.json, written by the job itself) and
the sweep's end line and continue line (written by gptlab's Hydra callbacks in this process) are the basic
launcher's. A task whose worker died without a result (killed, out of memory, a lost node) is recorded in its
job dir like any failed job (gpu_launcher.died). The cluster's nodes must see the launch dir at the same path (a
shared filesystem, as on SLURM) and import gptlab: the task runs from the launch dir.

Why not hydra-ray-launcher (PyPI): its 1.2.2 pins cloudpickle<3 (a downgrade here) and pulls ray[default] and
boto3 for its AWS launcher; what its `ray` launcher does for an existing cluster is these few lines on Ray's API.
Ray is imported only when a sweep starts (Hydra imports every launcher module at each start).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)
JOB_LOG = "gptlab.apps.train"  # the logger a sweep job says it skipped itself on
RAY_NICENESS_ENV = "RAY_worker_niceness"  # read by the raylet a local ray.init starts; a cluster's own is its own


class _SkipLines(logging.Filter):
    """Takes the line a job logs when it skips itself (gptlab.runs.sweep_jobs.SWEEP_SKIP) for the launching process
    to print: Ray forwards a worker's output to it asynchronously and drops what is unsent at ray.shutdown, which
    the end of a sweep of skipped jobs reaches at once."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[int, str]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        from gptlab.runs.sweep_jobs import SWEEP_SKIP

        if getattr(record, SWEEP_SKIP, False):
            self.lines.append((record.levelno, record.getMessage()))
            return False
        return True


def run_sweep_job(launcher: RayLauncher, overrides: list[str], idx: int,
                  state: dict[Any, Any]) -> tuple[JobReturn, list[tuple[int, str]]]:
    """One job, in a Ray worker: the basic launcher's steps for it, from the launch dir; with the line it logged if
    it skipped itself."""
    assert launcher.config is not None and launcher.hydra_context is not None
    launch_dir = str(launcher.config.hydra.runtime.cwd)
    if os.path.isdir(launch_dir):
        os.chdir(launch_dir)  # relative paths (outputs/, data caches) as in the launching process
    Singleton.set_state(state)
    setup_globals()
    sweep_config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"ray_{idx}"
        sweep_config.hydra.job.num = idx
    skips, train_log = _SkipLines(), logging.getLogger(JOB_LOG)
    train_log.addFilter(skips)
    try:
        done = run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                       config=sweep_config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    finally:
        train_log.removeFilter(skips)
    return done, skips.lines


def worker_env() -> dict[str, str]:
    """What a local Ray instance's workers need to import this gptlab and the tasks' modules: this process's import
    path (src/ where train.py runs from a checkout)."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


class RayLauncher(Launcher):
    def __init__(self, address: Optional[str] = None, num_cpus: float = 1, num_gpus: float = 0,
                 init: Optional[dict[str, Any]] = None) -> None:
        self.address, self.num_cpus, self.num_gpus = address, num_cpus, num_gpus
        self.init = OmegaConf.to_container(init, resolve=True) if OmegaConf.is_config(init) else dict(init or {})
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _connect(self) -> bool:
        """ray.init unless this process is connected already; True when this call started the connection."""
        import ray

        if ray.is_initialized():
            return False
        init = dict(self.init)
        if self.address is None:  # a local instance: its workers import what this process imports
            runtime_env = init.setdefault("runtime_env", {})
            runtime_env.setdefault("env_vars", {}).update({**worker_env(), **runtime_env.get("env_vars", {})})
            # Ray starts its workers at nice 15: on a machine with other work a training job then gets almost no
            # CPU (a 2-job tiny sweep at load 7 ran at 1.6% CPU for 7 minutes). The jobs are the point: nice 0.
            os.environ.setdefault(RAY_NICENESS_ENV, "0")
        ray.init(address=self.address, **init)
        return True

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray

        from gptlab.launch.gpu_launcher import died, entry_command
        from gptlab.launch.hydra_ddp import JOB_ENTRY_ENV

        assert self.config is not None
        os.environ[JOB_ENTRY_ENV] = entry_command()  # a job's DDP ranks > 0 (a local instance's workers inherit it)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        started = self._connect()
        task = ray.remote(run_sweep_job).options(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_retries=0)
        log.info(f"Ray: {len(job_overrides)} jobs on {ray.cluster_resources().get('CPU', 0):g} CPUs, "
                 f"{self.num_cpus:g} CPUs and {self.num_gpus:g} GPUs each")
        pending: dict[Any, tuple[int, Sequence[str]]] = {}
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            pending[task.remote(self, list(overrides), idx, Singleton.get_state())] = (idx, overrides)
        results: dict[int, JobReturn] = {}
        try:
            while pending:
                (done,), _ = ray.wait(list(pending), num_returns=1)
                idx, overrides = pending.pop(done)
                try:
                    results[idx], skipped = ray.get(done)
                    for level, line in skipped:
                        logging.getLogger(JOB_LOG).log(level, line)
                except (ray.exceptions.RayError, OSError) as err:  # the worker died: a result like the others
                    results[idx] = died(sweep_dir / str(idx), overrides, err, "the Ray worker's log (ray logs)")
        finally:
            for ref in pending:  # interrupted (Ctrl-C): the jobs it started end with it
                ray.cancel(ref, force=True)
            if started:
                ray.shutdown()
        return [results[idx] for idx in sorted(results)]
