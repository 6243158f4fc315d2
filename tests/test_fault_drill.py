"""scripts/fault_drill.py's drill: SIGKILLs at random moments and during checkpoint writes, each followed by
resume=auto, with $TMPDIR on another filesystem than the run dir where one can be arranged. CI runs two kills; the
README's full drill (20 kills) is the slow test."""

from __future__ import annotations

from pathlib import Path

import pytest

from gptlab.tools.fault_drill import run_drill


def _check(result) -> None:
    assert result.passed, result.table(0)
    assert result.resumes == result.kills and not result.leaked
    assert not result.missing_steps and not result.mismatched_steps  # every step, bit for bit


def test_killed_twice_once_mid_checkpoint_write_resumes_bit_identically(tmp_path: Path) -> None:
    result, _ = run_drill(kills=2, seed=0, aimed_share=0.5, workdir=tmp_path, steps=40)
    _check(result)
    assert result.kills == 2 and result.aimed_kills == 1, result.table(0)
    assert "another filesystem" in result.layout or "SAME" in result.layout


@pytest.mark.slow
def test_full_fault_drill_twenty_kills(tmp_path: Path) -> None:
    result, _ = run_drill(kills=20, seed=0, workdir=tmp_path)
    _check(result)
    assert result.kills == 20 and result.aimed_kills >= 4
