"""Which dirs of a sweep dir a report may read as its jobs, and why the others are left out.

A report groups jobs by their `.hydra/overrides.yaml`; a dir that is not one of the sweep's jobs (a run copied
in from elsewhere) or has lost its records would be grouped as a variant of its own, with blank labels, or split a
real variant and drop its verdict. Such a dir is named in the report with the reason and left out. A job belongs
when its overrides carry every swept key with one of the swept values (from the sweep's sweep_config.json, which
the launch writes), or, for a sweep from before that file, the override keys and run name most of its jobs have.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from gptlab.report.override_values import same, swept_values, typed
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE, SWEEP_CONFIG

OVERRIDES = Path(".hydra") / "overrides.yaml"


@dataclass(frozen=True)
class Screened:
    members: list[Path]  # job dirs with a run summary or a failure record, that belong to the sweep
    left_out: list[tuple[str, str]]  # (dir name, why) of dirs with a summary or record that are not read


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's subdirs in job order (2 before 10), hidden ones aside."""
    dirs = (p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
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


def _swept(sweep_dir: Path) -> tuple[dict[str, list | None], str | None] | None:
    """{swept key: its typed values (None: a range)} and the run name, from the launch's sweep_config.json."""
    path = sweep_dir / SWEEP_CONFIG
    try:
        identity = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    params = identity.get("sweeper_params", {})
    try:
        swept = dict(swept_values(line) for line in identity.get("swept", {}).values())
        # A sweeper's params: each a sweep string (`pre,post`, `interval(...)`); anything else is checked by key.
        swept |= {k: swept_values(f"{k}={v}")[1] if isinstance(v, str) else None for k, v in params.items()}
    except Exception:  # noqa: BLE001 - an unreadable identity: fall back to the jobs' majority
        return None
    return swept, identity.get("config", {}).get("name")


def _foreign(overrides: dict[str, str], name: str | None, swept: dict[str, list | None], sweep_name: str | None
             ) -> str | None:
    for key, values in swept.items():
        if key not in overrides:
            return f"its overrides have no {key}, which this sweep varies: a run from elsewhere"
        if values is not None:
            try:
                value = typed(key, overrides[key])
            except ValueError:
                value = overrides[key]
            if not any(same(value, v) for v in values):
                return f"{key}={overrides[key]} is not one of this sweep's values: a run from elsewhere"
    if sweep_name is not None and name is not None and name != sweep_name:
        return f"its run name {name!r} is not this sweep's {sweep_name!r}: a run from elsewhere"
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
    identity = _swept(sweep_dir)
    if identity is not None:
        swept, sweep_name = identity
    else:  # the shape most jobs share
        shapes = Counter(frozenset(o) for _, o, _ in read)
        top = max(shapes.values(), default=0)
        shape = next((frozenset(o) for _, o, _ in read if shapes[frozenset(o)] == top), frozenset())
        swept = {k: None for k in shape}
        names = Counter(r.get("name") for _, _, r in read if r.get("name"))
        sweep_name = names.most_common(1)[0][0] if len(names) > 1 or len(read) > 1 and names else None
    members = []
    for job_dir, overrides, record in read:
        why = _foreign(overrides, record.get("name"), swept, sweep_name)
        if why is None and identity is None and frozenset(overrides) != frozenset(swept):
            extra = sorted(set(overrides) ^ set(swept))
            why = f"its overrides differ in {', '.join(extra)} from the other jobs': a run from elsewhere"
        if why:
            left_out.append((job_dir.name, why))
        else:
            members.append(job_dir)
    return Screened(members, left_out)
