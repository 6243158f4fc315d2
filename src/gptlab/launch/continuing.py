"""How to go on after a run stopped early, as the one line that says it: resume=auto in the run's dir where it wrote a
checkpoint, the sweep launched again into its dir for a sweep's job (which skips its finished jobs), and a plain
rerun where nothing was saved (issue 46: a preempted sweep job was sent to finish alone, an OOM-killed rank to resume
from checkpoints that did not exist)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

from gptlab.errors import PreemptedError
from gptlab.runs.hydra_value import hydra_value


def resume_command(err: PreemptedError) -> str:
    """The command line that continues a preempted single run in its own dir."""
    run_dir = Path(err.checkpoint).resolve().parent.parent
    kept = [a for a in sys.argv[1:] if not a.startswith(("hydra.run.dir=", "resume=", "ckpt_path="))]
    return shlex.join(["python", sys.argv[0], *kept, "resume=auto", f"hydra.run.dir={hydra_value(str(run_dir))}"])


def sweep_resume_command() -> str:
    """The command line that continues the sweep a preempted job belongs to: the sweep launched again into its own
    dir, which skips its finished jobs, continues this one from its checkpoint and runs the rest (docs/ablations.md,
    "Resuming a sweep"). `resume=auto` in the job's dir would finish this job alone, and the job's own overrides with
    a sweeper's config (hparams_search=...) would start a new sweep. The sweep's overrides are those Hydra recorded
    in its multirun.yaml (the command line where there is none)."""
    from hydra.core.hydra_config import HydraConfig

    return sweep_command(Path(HydraConfig.get().sweep.dir), sys.argv[0], sys.argv[1:])


def sweep_command(sweep_dir: Path, script: str = "src/train.py", given: Optional[list[str]] = None) -> str:
    """The command that launches the sweep of `sweep_dir` again into it (running what is missing, continuing what
    stopped): its overrides as Hydra recorded them in multirun.yaml, else as gptlab recorded them in
    sweep_config.json (the task's only), else `given`."""
    import json

    from omegaconf import OmegaConf

    from gptlab.runs.run_dir import SWEEP_CONFIG

    sweep_dir = sweep_dir.resolve()
    recorded = sweep_dir / "multirun.yaml"
    try:
        if recorded.is_file():
            overrides = OmegaConf.load(recorded).hydra.overrides
            given = [*overrides.hydra, *overrides.task]
        elif (sweep_dir / SWEEP_CONFIG).is_file():
            given = list(json.loads((sweep_dir / SWEEP_CONFIG).read_text()).get("task_overrides") or [])
    except Exception:  # noqa: BLE001 - a damaged record: the command as given (the report names the record itself)
        pass
    # hydra.mode comes with -m; exclude_keys is what hydra_callbacks.NameSweepJobs adds at every launch
    dropped = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.mode=", "hydra.job.config.override_dirname.exclude_keys=",
               "resume=", "ckpt_path=", "-m", "--multirun")
    kept = [str(a) for a in given or [] if not str(a).startswith(dropped)]
    return shlex.join(["python", script, "-m", *kept, f"hydra.sweep.dir={hydra_value(str(sweep_dir))}"])


def continue_words(run_dir: Optional[Path], saved: bool) -> str:
    """How to go on after a run stopped early: resume its checkpoints where it wrote any (a sweep's job: the sweep),
    else run it again, since resume=auto over none would start from step 0 anyway."""
    from gptlab.runs.sweep_jobs import in_sweep_job

    if in_sweep_job():
        return f"Continue the sweep with: {sweep_resume_command()}"
    if saved and run_dir is not None:
        kept = [a for a in sys.argv[1:] if not a.startswith(("hydra.run.dir=", "resume=", "ckpt_path="))]
        command = shlex.join(["python", sys.argv[0], *kept, "resume=auto",
                              f"hydra.run.dir={hydra_value(str(run_dir.resolve()))}"])
        return f"The checkpoints written before it are whole: continue with {command}"
    return "No checkpoint was written yet, so there is nothing to resume: once fixed, run the command again."


def preempted_message(err: PreemptedError) -> str:
    """What a preempted run prints: how to continue it, or, for a sweep's job, the sweep."""
    from gptlab.runs.sweep_jobs import in_sweep_job

    if not in_sweep_job():
        return f"preempted ({err}). Continue with: {resume_command(err)}"
    # The command ends the line, as in every other "Continue with:", so that copying to the end of it runs.
    return (f"preempted ({err}). Launched again into its dir, the sweep skips its finished jobs, continues this one "
            "from its checkpoint and runs the others (a sweeper proposes its trials again in the same order, which a "
            "seeded sampler repeats; a job whose values differ from its dir's is refused, naming them). Continue the "
            f"sweep with: {sweep_resume_command()}")
