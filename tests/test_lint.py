"""`ruff check` over the code, with pyproject's [tool.ruff] settings (line length 120): CI fails on a violation."""

from __future__ import annotations

import shutil
import subprocess
import sys

from helpers import HANG_GUARD_S, ROOT


def test_ruff_check_passes() -> None:
    ruff = [sys.executable, "-m", "ruff"] if shutil.which("ruff") is None else ["ruff"]
    result = subprocess.run([*ruff, "check", "--no-cache", "src", "scripts", "tests"], cwd=ROOT,
                            capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, f"ruff check found violations (fix them, or `ruff check --fix`):\n{result.stdout}"
