"""A sweep job that fails (diverges, or is refused for its own values) is a result of the sweep, not its end.

Hydra's launchers stop a sweep at the first job whose task function raises or calls sys.exit, so the jobs after a
diverged one never ran. In a sweep job, `run_recording_failure` turns gptlab's own failures (NonFiniteLossError,
ConfigError) into a record, `<job dir>/failed.json` (run_dir.FAILURE_FILE), and returns None to the sweeper
(Optuna marks such a trial failed). Any other exception is a bug or a fault gptlab does not know (a library's error,
a lost file system): its traceback goes to the job's log and its record says "error" with the exception, so the
report names the job and why rather than leaving it out unexplained. A stop signal is not a failure: it ends the
sweep so that it can be launched again. At the end of the sweep
`failure_report` reads the records back from the sweep dir (so it also sees jobs that ran in another process,
e.g. under the submitit launcher) and the sweep exits 1 naming them.

Relaunch rule: a failed job is a result like a finished one. A relaunched sweep skips it and reports it again;
delete its failed.json to run it once more.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from gptlab.atomic import atomic_write_text
from gptlab.errors import NonFiniteLossError, PreemptedError, StoppedBySignal, find_config_error
from gptlab.runs.run_dir import FAILURE_FILE

log = logging.getLogger(__name__)
T = TypeVar("T")
EXIT_SOME_JOBS_FAILED = 1  # a sweep with failed jobs; a single run keeps 1 (diverged) and 2 (user error)


def failure_of(err: BaseException) -> Optional[dict[str, Any]]:
    """The record of a gptlab failure ("diverged" or "config error", with the message a single run would print),
    or None for an exception that is a bug."""
    if isinstance(err, NonFiniteLossError):
        return {"kind": "diverged", "reason": str(err), "exit_code": 1}
    config_error = find_config_error(err)
    if config_error is not None:
        return {"kind": "config error", "reason": str(config_error), "exit_code": 2}
    return None


def unexpected_failure(err: BaseException) -> dict[str, Any]:
    """The record of a failure gptlab has no words of its own for: the exception, named."""
    return {"kind": "error", "reason": f"{type(err).__name__}: {err} (the traceback is in the job's log)",
            "exit_code": 1}


def run_recording_failure(fn: Callable[[], T], output_dir: Path, job_name: str) -> Optional[T]:
    """`fn()`; if it fails as a sweep job may fail, write the failure record into `output_dir` and return None."""
    try:
        return fn()
    except (PreemptedError, StoppedBySignal):
        raise
    except Exception as err:
        record = failure_of(err)
        if record is None:
            log.exception("sweep job %s failed with an error gptlab did not expect", output_dir)
            record = unexpected_failure(err)
        record_failure(output_dir, job_name, record)
        return None


def record_failure(output_dir: Path, job_name: str, record: dict[str, Any]) -> None:
    """Write a job's failure record and say so: also for a job whose process died, written by its launcher."""
    record = {"job": output_dir.name, "overrides": job_name, **record}
    output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output_dir / FAILURE_FILE, json.dumps(record, indent=2))
    print(f"gptlab: sweep job {describe(record)} failed ({record['kind']}): {record['reason']} "
          f"[recorded in {output_dir / FAILURE_FILE}; the sweep goes on]", file=sys.stderr, flush=True)


def earlier_failure(output_dir: Path) -> Optional[dict[str, Any]]:
    """The failure record an earlier launch of this sweep job left, if any."""
    path = output_dir / FAILURE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def describe(record: dict[str, Any]) -> str:
    return f"{record['job']} ({record['overrides']})" if record.get("overrides") else str(record["job"])


def failed_jobs(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job of the sweep with a failure record, in job order."""
    if not sweep_dir.is_dir():
        return []
    dirs = sorted((p for p in sweep_dir.iterdir() if (p / FAILURE_FILE).is_file()), key=lambda p: (len(p.name), p.name))
    return [{**json.loads((p / FAILURE_FILE).read_text()), "job": p.name} for p in dirs]


def failure_report(sweep_dir: Path) -> Optional[str]:
    """The sweep's closing line when some jobs failed, naming each with its reason; None when none did."""
    failed = failed_jobs(sweep_dir)
    if not failed:
        return None
    jobs = sum(1 for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    listed = "; ".join(f"job {describe(r)}: {r['reason']}" for r in failed)
    return f"gptlab: {len(failed)} of {jobs} sweep jobs failed, the others ran: {listed}"
