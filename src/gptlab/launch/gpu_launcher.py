"""hydra/launcher=local_gpus: a `-m` sweep that fills one machine's GPUs, each job on its own `devices_per_job`
of them, the next job starting as soon as a running one ends and gives its GPUs back.

Built on submitit's LocalExecutor (the engine of Hydra's submitit_local launcher, already a gptlab dependency):
it starts each job as its own process with CUDA_VISIBLE_DEVICES set from its `visible_gpus`, pickles the job and
its result, keeps its log in `.submitit/`, and applies the time limit. What it lacks is the sharing out: it gives
every job the same GPUs and starts all jobs at once. This launcher hands each job free ids from a pool before
submitting it and waits for a job to end before reusing its ids; a failed job (an error, or a process that died)
gives its ids back like any other and is reported after the others finished. Why not the alternatives: Hydra's
joblib launcher runs jobs inside reused worker processes, where CUDA_VISIBLE_DEVICES cannot change once CUDA has
started and Lightning's DDP ranks would re-run the worker's command line; Ray's launcher needs a Ray runtime on the
machine for what is one process per job here.

The pool is `device_ids` (default: CUDA_VISIBLE_DEVICES's ids when set, else every GPU torch sees); ids need not be
real, so the same sharing is tested on a machine without GPUs.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

from gptlab.errors import ConfigError

log = logging.getLogger(__name__)


def default_device_ids() -> list[int]:
    """CUDA_VISIBLE_DEVICES's ids when it is set (the GPUs this machine lends the sweep), else every GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        try:
            return [int(i) for i in visible.split(",") if i.strip()]
        except ValueError:
            raise ConfigError(f"CUDA_VISIBLE_DEVICES={visible!r} is not a list of GPU numbers; give the pool as the "
                              "numbers nvidia-smi lists, e.g. hydra.launcher.device_ids=[0,1].") from None
    import torch

    return list(range(torch.cuda.device_count()))


def device_pool(device_ids: Optional[Sequence[Any]], devices_per_job: Any, field: str = "trainer.devices") -> list[int]:
    """The ids to share out, checked against what one job needs; `field` is the key that set devices_per_job
    (trainer.devices, which conf/hydra/launcher/local_gpus.yaml follows, unless the command set it itself)."""
    ids = default_device_ids() if device_ids is None else list(device_ids)
    if not all(isinstance(i, int) and i >= 0 for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"hydra.launcher.device_ids={ids} must be distinct GPU numbers, e.g. [0,1,2,3].")
    if not isinstance(devices_per_job, int) or devices_per_job < 1:
        raise ConfigError(f"each job of hydra/launcher=local_gpus needs a positive number of GPUs, not "
                          f"{devices_per_job!r} ({field}): give a count, e.g. {field}=1.")
    if not ids:
        raise ConfigError("hydra/launcher=local_gpus shares out GPUs but this machine has none (none in "
                          "CUDA_VISIBLE_DEVICES or torch.cuda.device_count() = 0); run the sweep without it, or name "
                          "the ids to share out with hydra.launcher.device_ids=[0,1].")
    if devices_per_job > len(ids):
        raise ConfigError(f"each job needs {field}={devices_per_job} GPUs but the pool has {len(ids)} "
                          f"({ids}); use {field}={len(ids)} (or fewer), or a larger hydra.launcher.device_ids.")
    return ids


def entry_command() -> str:
    """How this program was started, for a job's DDP ranks > 0 (launch/hydra_ddp.py)."""
    import __main__

    if __main__.__spec__ is not None:
        return f"-m {__main__.__spec__.name}"
    return str(Path(sys.argv[0]).absolute())


def died(job_dir: Path, overrides: Sequence[str], err: BaseException, log_dir: str) -> JobReturn:
    """A job whose process ended without a result (killed, out of memory): recorded in its dir like any failed
    sweep job (gptlab.runs.sweep_failures), so the sweep names it at its end and a relaunch treats it alike."""
    from gptlab.runs.sweep_failures import record_failure

    reason = f"its process ended without a result ({str(err).splitlines()[0] if str(err) else type(err).__name__}); " \
             f"its output is in {log_dir}"
    record_failure(job_dir, " ".join(filter_overrides(overrides)), {"kind": "died", "reason": reason, "exit_code": 1})
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)


class LocalGPULauncher(BaseSubmititLauncher):
    """Hydra launcher: one submitit local job per sweep job, on GPUs of its own from the pool."""

    _EXECUTOR = "local"

    def __init__(self, submitit_folder: str, devices_per_job: int, device_ids: Optional[list[int]] = None,
                 timeout_min: int = 4320, poll_s: float = 1.0) -> None:
        super().__init__(submitit_folder=submitit_folder, timeout_min=timeout_min)
        self.devices_per_job, self.device_ids, self.poll_s = devices_per_job, device_ids, poll_s

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None
        try:
            free = device_pool(self.device_ids, self.devices_per_job)
        except ConfigError as err:
            print(f"gptlab: error: {err}", file=sys.stderr)
            sys.exit(2)
        from gptlab.launch.hydra_ddp import JOB_ENTRY_ENV  # Lightning: imported when a sweep starts, not at scan

        os.environ[JOB_ENTRY_ENV] = entry_command()  # inherited by each job's process
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        executor = submitit.LocalExecutor(folder=self.params["submitit_folder"])
        waiting = list(enumerate(job_overrides, start=initial_job_idx))
        running: dict[Any, tuple[int, Sequence[str], list[int]]] = {}
        results: dict[int, JobReturn] = {}
        log.info(f"Sharing {len(free)} GPUs {free} out to {len(waiting)} jobs, {self.devices_per_job} each")
        try:
            while waiting or running:
                while waiting and len(free) >= self.devices_per_job:
                    idx, overrides = waiting.pop(0)
                    ids, free = free[:self.devices_per_job], free[self.devices_per_job:]
                    executor.update_parameters(timeout_min=self.params["timeout_min"], tasks_per_node=1,
                                               gpus_per_node=len(ids), visible_gpus=tuple(ids))
                    job = executor.submit(self, list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}",
                                          Singleton.get_state())
                    log.info(f"\t#{idx} on CUDA_VISIBLE_DEVICES={','.join(map(str, ids))}: "
                             f"{' '.join(filter_overrides(overrides))}")
                    running[job] = (idx, overrides, ids)
                ended = [job for job in running if job.done()]
                if not ended:
                    time.sleep(self.poll_s)
                for job in ended:
                    idx, overrides, ids = running.pop(job)
                    free = sorted(free + ids)
                    try:
                        results[idx] = job.results()[0]
                    except Exception as err:  # the process died: a result like the others
                        job_dir = Path(str(self.config.hydra.sweep.dir)) / str(idx)
                        results[idx] = died(job_dir, overrides, err, str(job.paths.folder))
        finally:
            for job in running:  # interrupted (Ctrl-C): the jobs it started end with it
                job.cancel(check=False)
        return [results[idx] for idx in sorted(results)]
