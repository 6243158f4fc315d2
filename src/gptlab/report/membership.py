"""Which dirs of a sweep dir a report may read as its jobs, and why the others are left out.

A report groups jobs by their `.hydra/overrides.yaml`; a dir that is not one of the sweep's jobs (a run copied
in from elsewhere) or has lost its records would be grouped as a variant of its own, with blank labels, or split a
real variant and drop its verdict. Such a dir is named in the report with the reason and left out.

The jobs a sweep ran are rebuilt from what its launch recorded in sweep_config.json, as Hydra's sweeper built
them: the sweeper's params (an experiment's list) first, then the command line's overrides, a later value of a key
replacing an earlier one. So `model.pos_emb=learned,rope` on the command line, widening or narrowing an
experiment's list or fixing one value, decides the sweep's values, as it decided the jobs. A job belongs when its
overrides set exactly those keys, each to one of its values (keys a relaunch may change aside). A sweep recorded
before the launch kept its command line has only its swept overrides: those and the params are checked, other
keys not. A sweep from before sweep_config.json is judged by the override keys and run name most of its jobs have.
Every report that reads a sweep (ablation, LR-tuned, ladder) takes its jobs from `screen`.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from gptlab.report.override_values import launched_values, same_text
from gptlab.report.tensorboard_bands import BANDS_DIR
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE, SWEEP_CONFIG
from gptlab.runs.sweep_jobs import RELAUNCH_MAY_CHANGE

OVERRIDES = Path(".hydra") / "overrides.yaml"


@dataclass(frozen=True)
class Screened:
    members: list[Path]  # job dirs with a run summary or a failure record, that belong to the sweep
    left_out: list[tuple[str, str]]  # (dir name, why) of dirs with a summary or record that are not read


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's subdirs in job order (2 before 10), hidden ones and the report's seed bands aside."""
    dirs = (p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != BANDS_DIR)
    return sorted(dirs, key=lambda p: (len(p.name), p.name))


def _records(job_dir: Path) -> tuple[dict[str, str] | None, dict | None, str | None]:
    """(overrides, summary or failure record, why the dir is damaged)."""
    path = job_dir / SUMMARY_FILE if (job_dir / SUMMARY_FILE).exists() else job_dir / FAILURE_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return None, None, f"{path} cannot be read ({type(err).__name__})"
    if not isinstance(record, dict) or (path.name == SUMMARY_FILE and not isinstance(record.get("tokens_per_step"),
                                                                                       int)):
        return None, None, f"{path} is not the record train.py writes"
    if not (job_dir / OVERRIDES).is_file():
        return None, record, f"no {OVERRIDES}: the values it ran with are unknown"
    try:
        items = yaml.safe_load((job_dir / OVERRIDES).read_text()) or []
    except (OSError, yaml.YAMLError) as err:
        return None, record, f"{job_dir / OVERRIDES} cannot be read ({type(err).__name__})"
    if not isinstance(items, list) or not all(isinstance(i, str) and "=" in i for i in items):
        return None, record, f"{job_dir / OVERRIDES} is not a list of key=value overrides"
    return dict(item.split("=", 1) for item in items), record, None


@dataclass(frozen=True)
class Launched:
    """The jobs a sweep's launch made, key by key."""

    values: dict[str, list[str] | None]  # {key as the jobs spell it: its values (None: an interval, any value)}
    exact: bool  # the whole command line was recorded: a job may set no other key
    name: str | None  # the run name of its jobs


def launched(sweep_dir: Path) -> Launched | None:
    """What the launch recorded in sweep_config.json, merged as Hydra's sweeper merges it; None without a readable
    record."""
    record = sweep_dir / SWEEP_CONFIG
    try:
        identity = json.loads(record.read_text())
        params = identity.get("sweeper_params") or {}
        command = identity.get("task_overrides")
        lines = [f"{k}={v}" for k, v in params.items()]  # as the sweeper spells its params
        lines += command if command is not None else list((identity.get("swept") or {}).values())
        values = dict(launched_values(line) for line in lines)  # a later line of a key replaces an earlier one
        name = (identity.get("config") or {}).get("name")
    except Exception as err:  # noqa: BLE001 - an unreadable identity: fall back to the jobs' majority, said
        if record.exists():  # damaged (a sweep from before the record has none: nothing to say)
            print(f"gptlab: warning: {record} is unreadable ({type(err).__name__}: {str(err)[:120]}): this sweep's "
                  "jobs are judged by the override keys and run name most of them have, as for a sweep launched "
                  "before it was recorded; launch the same sweep again with -m to record it anew.",
                  file=sys.stderr, flush=True)
        return None
    values = {k: v for k, v in values.items() if k.lstrip("+~") not in RELAUNCH_MAY_CHANGE}
    return Launched(values, command is not None, name)


def _foreign(overrides: dict[str, str], name: str | None, launch: Launched) -> str | None:
    for key, values in launch.values.items():
        if key not in overrides:
            return f"its overrides have no {key}, which every job of this sweep sets: a run from elsewhere"
        if values is not None and not any(same_text(key, overrides[key], v) for v in values):
            return (f"{key}={overrides[key]} is not one of this sweep's values ({', '.join(values)}): a run from "
                    "elsewhere")
    extra = sorted(k for k in overrides if k not in launch.values and k.lstrip("+~") not in RELAUNCH_MAY_CHANGE)
    if launch.exact and extra:
        return f"its overrides set {', '.join(extra)}, which this sweep's launch did not: a run from elsewhere"
    if launch.name is not None and name is not None and name != launch.name:
        return f"its run name {name!r} is not this sweep's {launch.name!r}: a run from elsewhere"
    return None


def screen(sweep_dir: Path) -> Screened:
    """The sweep's readable jobs and the dirs left out (foreign or damaged), each with its reason."""
    read: list[tuple[Path, dict[str, str], dict]] = []
    left_out: list[tuple[str, str]] = []
    for job_dir in job_dirs(sweep_dir):
        if not ((job_dir / SUMMARY_FILE).exists() or (job_dir / FAILURE_FILE).exists()):
            continue  # killed or still running: missing_jobs_note lists it
        overrides, record, damaged = _records(job_dir)
        if damaged:
            left_out.append((job_dir.name, damaged))
        else:
            read.append((job_dir, overrides, record))
    launch = launched(sweep_dir)
    majority = launch is None
    if majority:  # the shape most jobs share
        shapes = Counter(frozenset(o) for _, o, _ in read)
        top = max(shapes.values(), default=0)
        shape = next((frozenset(o) for _, o, _ in read if shapes[frozenset(o)] == top), frozenset())
        names = Counter(r.get("name") for _, _, r in read if r.get("name"))
        name = names.most_common(1)[0][0] if len(names) > 1 or len(read) > 1 and names else None
        launch = Launched({k: None for k in shape}, False, name)
    members = []
    for job_dir, overrides, record in read:
        why = _foreign(overrides, record.get("name"), launch)
        if why is None and majority and frozenset(overrides) != frozenset(launch.values):
            extra = sorted(set(overrides) ^ set(launch.values))
            why = f"its overrides differ in {', '.join(extra)} from the other jobs': a run from elsewhere"
        if why:
            left_out.append((job_dir.name, why))
        else:
            members.append(job_dir)
    return Screened(members, left_out)


def missing_jobs(sweep_dir: Path) -> list[str] | None:
    """The jobs the sweep's launch made (the product of its recorded values, as Hydra's sweeper makes them) that no
    dir of the sweep dir holds, each as its swept `key=value`s; None where the launch is not recorded or searched
    an interval (its jobs cannot be listed)."""
    launch = launched(sweep_dir)
    if launch is None or any(v is None for v in launch.values.values()):
        return None
    swept = {k: v for k, v in launch.values.items() if len(v) > 1}
    present = []
    for job_dir in job_dirs(sweep_dir):
        try:
            items = yaml.safe_load((job_dir / OVERRIDES).read_text()) or []
            present.append(dict(item.split("=", 1) for item in items))
        except (OSError, yaml.YAMLError, ValueError, TypeError, AttributeError):
            continue  # a dir without its records: screen names it
    missing = []
    for values in itertools.product(*swept.values()):
        wanted = dict(zip(swept, values))
        if not any(all(k in job and same_text(k, job[k], v) for k, v in wanted.items()) for job in present):
            missing.append(", ".join(f"{k}={v}" for k, v in wanted.items()))
    return missing
