"""scripts/bench_startup.py times what its rows name: each round has dirs of its own (a second round into the first
round's run dir was refused, and the refusal was timed as a run), and a command that exits otherwise, or does not
say what its row needs, stops the benchmark instead of becoming a number."""

from __future__ import annotations

import os
import sys

import pytest

from gptlab.tools.benchmarks import startup


def test_every_round_has_its_own_dirs_and_a_rows_prerequisite_runs_first(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(startup, "cpu_seconds", lambda name, command, env: ran.append((name, command.argv)) or 1.0)
    startup.main(2, only=["nothing to do"])  # the finished-run row alone: its 1-step run comes with it
    assert [name for name, _ in ran] == [startup.REFERENCE, startup.ONE_STEP, startup.FINISHED] * 2
    dirs = [[a for a in argv if "dir=" in a] for name, argv in ran if name == startup.ONE_STEP]
    assert dirs[0] != dirs[1] and all(d for d in dirs)
    assert [a for a in ran[2][1] if "dir=" in a] == dirs[0]  # resume=auto on the run of its own round


def test_a_row_that_does_not_do_what_it_names_stops_the_benchmark() -> None:
    env = dict(os.environ)
    refused = startup.Command([sys.executable, "-c", "import sys; print('refused'); sys.exit(2)"], says="Best")
    with pytest.raises(RuntimeError, match="'a run' exited 2 .*needs 0 and 'Best'"):
        startup.cpu_seconds("a run", refused, env)
    silent = startup.Command([sys.executable, "-c", "pass"], says="is finished")
    with pytest.raises(RuntimeError, match="'nothing to do' exited 0"):
        startup.cpu_seconds("nothing to do", silent, env)
    assert startup.cpu_seconds("ok", startup.Command([sys.executable, "-c", "print('is finished')"],
                                                     says="is finished"), env) > 0
