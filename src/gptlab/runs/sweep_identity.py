"""What makes a sweep the same sweep when it is launched again into its sweep dir, checked before Hydra writes
anything there.

Hydra writes a job's `.hydra/` files (config.yaml, overrides.yaml) into its dir before the task function runs, so a
check in the task function (sweep_jobs.check_same_sweep_job) refuses another config only after that config has
overwritten job 0's records. The sweep's own config is known earlier, at `on_multirun_start`: its composed config
without the swept values (Hydra leaves those to each job), the swept overrides and a sweeper's `params`. The first
launch stores them in `<sweep dir>/sweep_config.json` (run_dir.SWEEP_CONFIG); a later launch must match them, but
for sweep_jobs.RELAUNCH_MAY_CHANGE (a larger trainer.max_steps continues finished jobs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from gptlab.atomic import atomic_write_text
from gptlab.errors import ConfigError
from gptlab.runs.flat_config import flatten
from gptlab.runs.run_dir import SWEEP_CONFIG
from gptlab.runs.sweep_jobs import RELAUNCH_MAY_CHANGE


def sweep_identity(config: DictConfig) -> dict[str, Any]:
    """The master config of a `-m` launch, key by key (unresolved: `${now:...}` and `${hydra:...}` stay as
    written), its swept overrides and its sweeper's params; as plain JSON values. Also its whole command line
    (`task_overrides`, not compared at a relaunch: `config` and `swept` hold what must match), from which with the
    params a report rebuilds the jobs the sweep ran (report.membership)."""
    task = OmegaConf.to_container(config, resolve=False)
    task.pop("hydra", None)
    overrides = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    swept = {o.key_or_group: o.input_line for o in overrides
             if o.is_sweep_override() and o.key_or_group not in RELAUNCH_MAY_CHANGE}
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    identity = {
        "config": {k: v for k, v in flatten(task) if k not in RELAUNCH_MAY_CHANGE},
        "swept": swept,
        "sweeper_params": {} if params is None else OmegaConf.to_container(params, resolve=False),
        "task_overrides": list(config.hydra.overrides.task),
    }
    return json.loads(json.dumps(identity, default=str))  # as it reads back from the file


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every key that differs, the swept overrides and sweeper params included."""
    out = []
    for part in ("swept", "sweeper_params", "config"):
        old, new = before.get(part, {}), now.get(part, {})
        for key in sorted(old.keys() | new.keys()):
            if old.get(key, "<unset>") != new.get(key, "<unset>"):
                label = key if part == "config" else f"{key} ({'swept' if part == 'swept' else 'sweeper param'})"
                out.append(f"{label}: {old.get(key, '<unset>')!r} -> {new.get(key, '<unset>')!r}")
    return out


def check_distinct_jobs(config: DictConfig) -> None:
    """A swept value given twice (`seed=1,1`) makes two jobs of one run, which a report would count as two
    independent seeds; refused at launch, before any job runs. Discrete sweeps only: Optuna's ranges sample."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    lines = [*config.hydra.overrides.task, *(f"{k}={v}" for k, v in params.items())]
    for override in OverridesParser.create().parse_overrides(lines):
        if not (override.is_sweep_override() and override.is_discrete_sweep()):
            continue
        values = list(override.sweep_string_iterator())
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ConfigError(
                f"{override.input_line} gives {', '.join(repeated)} more than once: those jobs would be the same "
                "run twice, not independent repeats; give each value once (distinct seeds for repeats)."
            )


def check_or_record_sweep(config: DictConfig) -> None:
    """Refuse a launch into a sweep dir that holds another sweep, before anything is written; record a new sweep's
    identity. A sweep dir made before this file existed has none and is left to the per-job check."""
    sweep_dir = Path(config.hydra.sweep.dir)
    path = sweep_dir / SWEEP_CONFIG
    now = sweep_identity(config)
    if path.is_file():
        changed = differences(json.loads(path.read_text()), now)
        if changed:
            shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
            raise ConfigError(
                f"hydra.sweep.dir={str(sweep_dir)!r} holds another sweep ({shown}); nothing was written. Launch "
                "the same sweep command to resume it (trainer.max_steps may grow), or give a new hydra.sweep.dir."
            )
    elif not sweep_dir.exists() or not any(sweep_dir.iterdir()):
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(now, indent=2, sort_keys=True))
