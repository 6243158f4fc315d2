"""A `-m` sweep job's identity: whether this process is one, its name (the overrides that differ between the jobs),
and, when a sweep is launched again into its sweep dir, whether this job already finished or was run with another
config. gptlab.apps.train acts on them: skip, continue from the newest checkpoint, or refuse."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from gptlab.errors import ConfigError
from gptlab.runs.flat_config import flatten
from gptlab.runs.run_dir import RESOLVED_CONFIG, SUMMARY_FILE


def in_sweep_job() -> bool:
    """Whether this process runs one job of a `-m` sweep (rank 0 of it: DDP ranks > 0 run in RUN mode)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_job_name() -> str:
    """A sweep job's `hydra.job.override_dirname`: the overrides that differ between the sweep's jobs (see
    hydra_callbacks.NameSweepJobs), e.g. `model.norm=post,seed=2`; "" for a single run. A path separator in a value
    becomes "_" and a name too long for a file name is cut, with a hash of the whole to keep names apart."""
    from hydra.core.hydra_config import HydraConfig

    if not in_sweep_job():
        return ""
    name = HydraConfig.get().job.override_dirname.replace(os.sep, "_")
    if len(name.encode()) > 200:
        name = name.encode()[:180].decode(errors="ignore") + "-" + hashlib.sha1(name.encode()).hexdigest()[:10]
    return name


def swept_overrides() -> dict[str, str]:
    """A sweep job's overrides that differ between the sweep's jobs, key to value as typed (`model.norm: post`,
    `seed: 2`; a group's choice as `model: gpt2_small`): those of sweep_job_name, which NameSweepJobs leaves out of
    override_dirname's exclude_keys. Empty for a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not in_sweep_job():
        return {}
    hydra = HydraConfig.get()
    excluded = set(hydra.job.config.override_dirname.exclude_keys)
    overrides = OverridesParser.create().parse_overrides(list(hydra.overrides.task))
    return {o.key_or_group: o.value() for o in overrides if o.key_or_group not in excluded}


# The `extra` key of the line a relaunched sweep's job logs when it skips itself (finished, or failed before): a
# launcher whose jobs run elsewhere (hydra/launcher=ray) hands these lines back to print them itself.
SWEEP_SKIP = "gptlab_sweep_skip"
# What may change between two launches of the same sweep job: a larger max_steps continues a finished job.
RELAUNCH_MAY_CHANGE = {"trainer.max_steps", "ckpt_path", "resume", "print_config"}


def check_same_sweep_job(cfg: DictConfig, output_dir: Path) -> None:
    """A sweep launched again into an existing sweep dir must be the same sweep: job N's config as it was (but
    trainer.max_steps), or job N's checkpoints and results belong to another experiment."""
    path = output_dir / RESOLVED_CONFIG
    if not path.is_file():
        return
    before = dict(flatten(OmegaConf.to_container(OmegaConf.load(path), resolve=False)))  # key by key
    now = dict(flatten(OmegaConf.to_container(cfg, resolve=True)))
    changed = sorted(k for k in before.keys() | now.keys()
                     if k not in RELAUNCH_MAY_CHANGE and before.get(k, "<unset>") != now.get(k, "<unset>"))
    if changed:
        shown = ", ".join(f"{k}: {before.get(k, '<unset>')!r} -> {now.get(k, '<unset>')!r}" for k in changed[:5])
        raise ConfigError(
            f"hydra.sweep.dir={str(output_dir.parent)!r} already holds job {output_dir.name}, run with another config "
            f"({shown}{', ...' if len(changed) > 5 else ''}); launch the same sweep command to resume it, or give "
            "a new hydra.sweep.dir."
        )


def finished_sweep_job(cfg: DictConfig, output_dir: Path) -> Optional[dict[str, Any]]:
    """The run_summary.json of this sweep job's earlier launch if that launch finished: a summary is written only
    when fit ends normally (not on a kill, preemption, NaN or error), and its global_step must have reached this
    launch's trainer.max_steps (a job launched again with more steps continues from its checkpoint instead). A
    run bounded by epochs (max_steps=-1) is finished when it wrote its summary."""
    path = output_dir / SUMMARY_FILE
    if not in_sweep_job() or not path.is_file():
        return None
    summary = json.loads(path.read_text())
    max_steps = cfg.trainer.get("max_steps", -1)
    return summary if max_steps is None or max_steps < 0 or summary.get("global_step", 0) >= max_steps else None


def check_sweep_is_multirun(config: DictConfig) -> None:
    """A config that carries a sweep (an experiment's or hparams_search's `hydra.sweeper.params`) runs as one job
    without -m: Hydra drops the sweep in silence. Refused unless every swept key is pinned on the command line, which
    runs one job of the sweep on purpose (`experiment=ablate_gpt2_to_llama +rung=swiglu`)."""
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    task = list(OmegaConf.select(config, "hydra.overrides.task") or [])
    pinned = {arg.split("=", 1)[0].lstrip("+~") for arg in task}
    unpinned = {key: value for key, value in params.items() if key.lstrip("+~") not in pinned}
    if not unpinned:
        return
    source = next((arg for arg in task if arg.split("=", 1)[0] in ("experiment", "hparams_search")),
                  "hydra.sweeper.params")
    swept = "; ".join(f"{key} over {value}" for key, value in unpinned.items())
    one_job = " ".join(f"{key}={str(value).split(',')[0]}" for key, value in unpinned.items())
    raise ConfigError(f"{source} sweeps {swept} (hydra.sweeper.params), which only a multirun launches: without -m "
                      f"this would train one job and drop the sweep. Add -m to run the sweep, or pin the swept "
                      f"keys to run one job of it (e.g. `{one_job}`).")
