"""scripts/fault_drill.py's drill: SIGKILLs at random moments and during checkpoint writes, each followed by
resume=auto, with $TMPDIR on another filesystem than the run dir where one can be arranged. CI runs two kills; the
README's full drill (20 kills) is the slow test."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import drill_launch

from gptlab.tools.fault_drill import run_drill


def _check(result) -> None:
    assert result.passed, result.table(0)
    assert result.resumes == result.kills and not result.leaked
    assert not result.missing_steps and not result.mismatched_steps  # every step, bit for bit


def test_killed_twice_once_mid_checkpoint_write_resumes_bit_identically(tmp_path: Path) -> None:
    result, _ = run_drill(kills=2, seed=0, aimed_share=0.5, workdir=tmp_path, steps=40,
                          launch=drill_launch)
    _check(result)
    assert result.kills == 2 and result.aimed_kills == 1, result.table(0)
    assert "another filesystem" in result.layout or "SAME" in result.layout


@pytest.mark.slow
def test_full_fault_drill_twenty_kills(tmp_path: Path) -> None:
    result, _ = run_drill(kills=20, seed=0, workdir=tmp_path)
    _check(result)
    assert result.kills == 20 and result.aimed_kills >= 4


def test_a_failed_drill_keeps_the_logs_its_message_names(tmp_path: Path, monkeypatch) -> None:
    from gptlab.tools import fault_drill

    def failing_run(self, kills, aimed_share):
        (self.root / "attempt001.log").write_text("what went wrong")
        result = fault_drill.DrillResult(self.steps)
        result.failures.append(f"attempt 1 did not resume (see {self.root}/attempt001.log)")
        return result

    monkeypatch.setattr(fault_drill.Drill, "run", failing_run)
    result, _ = run_drill(kills=2, workdir=tmp_path, tmpdir=tmp_path / "tmp")
    assert not result.passed
    named = Path(result.failures[0].split("(see ")[1].rstrip(")"))
    assert named.read_text() == "what went wrong"


def test_a_drill_that_raises_leaves_nothing_of_its_own(tmp_path: Path, monkeypatch) -> None:
    """An error or Ctrl-C inside the drill removes its run dirs (issue 54: nothing left behind); --keep keeps them."""
    from gptlab.tools import fault_drill

    def interrupted(self, kills, aimed_share):  # type: ignore[no-untyped-def]
        (self.root / "attempt001.log").write_text("half a drill")
        raise KeyboardInterrupt

    monkeypatch.setattr(fault_drill.Drill, "run", interrupted)
    (tmp_path / "tmp").mkdir()
    with pytest.raises(KeyboardInterrupt):
        run_drill(kills=2, workdir=tmp_path, tmpdir=tmp_path / "tmp")
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"]
    with pytest.raises(KeyboardInterrupt):
        run_drill(kills=2, workdir=tmp_path, tmpdir=tmp_path / "tmp", keep=True)
    assert len(list(tmp_path.glob("fault-drill-*/attempt001.log"))) == 1


def test_kill_steps_are_drawn_from_the_steps_left_not_from_the_clock(tmp_path: Path) -> None:
    """Each kill's step follows the one the attempt resumes from and leaves room for the kills still to come."""
    from gptlab.tools.fault_drill import Drill

    drill = Drill(tmp_path, tmp_path, steps=40, checkpoint_every=4, seed=0)
    for resumed_from, kills_left in [(0, 2), (12, 1), (0, 20), (37, 3)]:
        for _ in range(50):
            step = drill.kill_step(resumed_from, kills_left)
            assert step is None or resumed_from < step <= resumed_from + max(1, (39 - resumed_from) // kills_left)
    assert drill.kill_step(39, 1) is None  # no step left before the end
