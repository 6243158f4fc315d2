"""The suite's hang guard (pyproject's pytest-timeout settings): a hung test fails alone, with a stack that shows
where it hung, and the session goes on to the next test instead of dying or waiting forever."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import CHECKOUT_ENV, HANG_GUARD_S, ROOT

HUNG_THEN_FINE = textwrap.dedent("""
    import threading

    def wait_forever():
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()

    def test_hangs():
        wait_forever()

    def test_runs_after_the_hang():
        assert True
""")


def test_a_hung_test_fails_with_its_stack_and_the_session_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(HUNG_THEN_FINE)
    # The project's own settings, with the 1800 s default shortened so the test is cheap.
    cmd = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
           "-p", "no:cacheprovider", "-o", "timeout=3", "-q", str(tmp_path / "test_hung.py")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=CHECKOUT_ENV, timeout=HANG_GUARD_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "Timeout (>3.0s) from pytest-timeout" in out, out
    assert "def wait_forever():" in out and "test_hung.py:7" in out, out  # the stack shows where it hung
