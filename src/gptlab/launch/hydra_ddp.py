"""Make Lightning's DDP ranks > 0 join the Hydra job that started them, also under `-m`.

Lightning starts ranks > 0 by re-running the script with `sys.argv[1:]` plus `hydra.run.dir=<run.dir>`.
Under multirun that argv still holds `-m` and the sweep's comma lists, so every child starts a whole
sweep of its own in a fresh sweep dir (lightning-hydra-template #393). The fix: re-run the *job* instead
of the command line — the job's own overrides (`hydra.overrides.task`, which already holds this job's
sweep values) in single-run mode, with the job's output dir as run dir.

`job_subprocess_cmd` replaces a private Lightning function (`_hydra_subprocess_cmd`, patched by
gptlab.lightning_internals.install); nothing public lets us choose the children's command, and subclassing the
launcher would copy all of its environment set-up.
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import contextmanager
from typing import Iterator, Sequence

import torch.distributed as dist

from gptlab.signals import FLAG

# Set in the launching process by Lightning's DDP launcher; left behind, they make the next job of a
# sweep believe it is a child rank of an already running group.
LAUNCHER_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
# Set by a launcher whose jobs run inside another program (submitit's worker): the sweep's own entry script, which
# the job's ranks > 0 must run instead of the worker's command line.
JOB_ENTRY_ENV = "GPTLAB_JOB_ENTRY"


def job_subprocess_cmd(local_rank: int) -> tuple[Sequence[str], str]:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from hydra.utils import get_original_cwd, to_absolute_path

    import __main__

    FLAG.hold_for_children()  # until watch_ranks: Lightning starts the child right after this returns
    hydra_cfg = HydraConfig.get()
    if os.environ.get(JOB_ENTRY_ENV):  # a job run inside a launcher's worker (hydra/launcher=local_gpus)
        command = [sys.executable, *shlex.split(os.environ[JOB_ENTRY_ENV])]
    elif __main__.__spec__ is None:
        command = [sys.executable, to_absolute_path(sys.argv[0])]
    else:
        command = [sys.executable, "-m", __main__.__spec__.name]
    command += list(hydra_cfg.overrides.task)
    command += [
        f"hydra.run.dir={hydra_cfg.runtime.output_dir}",
        f"hydra.job.name={hydra_cfg.job.name}_rank{local_rank}",  # its own log file in the job dir
        "hydra.output_subdir=null",  # rank 0 already saved the job's .hydra/ configs
        "hydra.mode=RUN",  # a config that sets MULTIRUN (hparams_search) would otherwise start a sweep again
    ]
    if hydra_cfg.mode == RunMode.MULTIRUN and not any(o.startswith(("ckpt_path=", "resume=")) for o in command):
        command.append("resume=auto")  # rank 0 of a sweep job resumes from its checkpoint (train.run): so must they
    return command, get_original_cwd()


@contextmanager
def ddp_job_scope() -> Iterator[None]:
    """One sweep job's distributed life: afterwards the process group and the launcher's environment are torn
    down so the next job in this process starts clean (its children are routed into its dir by `job_subprocess_cmd`,
    installed with the trainer)."""
    saved = {key: os.environ.get(key) for key in LAUNCHER_ENV}
    try:
        yield
    finally:
        FLAG.release()  # held by job_subprocess_cmd if the ranks' start failed before watch_ranks released it
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

