"""How the drills (fault_drill, preemption_drill) start a training job.

A launch is a callable (command, cwd, env, log path) -> a handle with `pid`, `poll()`, `wait()`, `send_signal()`
and `returncode`, as subprocess.Popen has. The scripts use `start_job`, a plain subprocess with stdout and stderr
in the log. The tests pass one that forks the job from an interpreter that has already imported torch and Lightning
(tests/helpers.py): those imports are most of a drill job's CPU time on a small machine, and the drills start many.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable

Launch = Callable[[list[str], Path, dict[str, str], Path], Any]


def start_job(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """The job in its own process group (a drill kills the group when it must), its output in `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
