"""scripts/gpu_check.py, the one command a session lent a GPU runs: `--device cpu --tiny` runs every part at toy sizes
here, so the script keeps working between GPU loans. Each part ends in its table or one clear "skipped: <reason>" or
"failed: <reason>", and a part that fails stops none after it. Structure and content only: a loaded machine may time
a part out, which the report must then say."""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import HANG_GUARD_S, ROOT, run_python

from gptlab.tools.gpu_check.parts import PARTS, pytest_outcome
from gptlab.tools.gpu_check.runner import (
    GPU_BUDGET_S,
    MAX_STRETCH,
    REFERENCE_GFLOPS,
    child_env,
    crash_reason,
    part_limit,
    run_part,
    stretch,
)

STATUS = re.compile(r"^`[^`]+`: (ok|skipped: .+|failed: .+) \(\d+ s, limit \d+ s\)$")


def gpu_check(*args: str, out: Path) -> subprocess.CompletedProcess:
    return run_python([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), *args, "--out", str(out)], ROOT,
                      {**os.environ, "PYTHONPATH": str(ROOT / "src")})


def sections(report: str) -> dict[str, list[str]]:
    """{part: the lines of its section} from gpu_check.md."""
    found: dict[str, list[str]] = {}
    for block in report.split("\n## ")[1:]:
        head, *lines = block.splitlines()
        found[head.split(":")[0]] = [line for line in lines if line]
    return found


def tiny(out: Path, *parts: str, fail: str) -> tuple[subprocess.CompletedProcess, dict[str, list[str]]]:
    # A budget above the default 170 s: a loaded CI machine still runs every part (each under its own limit).
    proc = gpu_check("--device", "cpu", "--tiny", "--fail", fail, "--budget", "1200", *parts, out=out)
    assert (out / "gpu_check.log").is_file(), proc.stderr[-3000:]
    return proc, sections((out / "gpu_check.md").read_text())


# CI's run: the cheapest parts that still show a table, a skip and an injected failure with a part after it
# (parts run cheapest first with --tiny). The whole list runs in the `slow` test below.
SHORT = ("--parts", "fused_sweep", "train_step", "pytest")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict[str, list[str]]]:
    return tiny(tmp_path_factory.mktemp("gpu_check"), *SHORT, fail="train_step")


def test_every_part_ends_in_its_table_or_a_reason(tiny_run) -> None:
    proc, found = tiny_run
    assert proc.returncode == 1, proc.stdout[-3000:]  # the injected failure
    assert list(found) == list(SHORT[1:])
    assert_each_part_ends_in_its_table_or_a_reason(found, failed="train_step")


def assert_each_part_ends_in_its_table_or_a_reason(found: dict[str, list[str]], failed: str) -> None:
    for name, lines in found.items():
        status = STATUS.match(lines[0])
        assert status, (name, lines[0])
        if status.group(1) == "ok":
            assert any(line.startswith("|---") for line in lines), (name, lines)
        elif name != failed:  # nothing but the injected failure fails, unless a loaded machine timed a part out
            assert status.group(1).startswith("skipped") or "timed out" in status.group(1), (name, lines[0])


def test_a_failing_part_stops_nothing_after_it(tiny_run) -> None:
    proc, found = tiny_run
    assert "failed: exited 1: RuntimeError: failure injected by --fail train_step" in found["train_step"][0]
    order = list(found)
    after = order[order.index("train_step") + 1:]
    assert after and all(STATUS.match(found[name][0]) for name in after), order


@pytest.mark.slow
def test_every_part_runs_at_toy_sizes_and_those_without_their_hardware_say_so(tmp_path: Path) -> None:
    """The whole list, as a session lent a GPU runs it (minutes on a loaded 2-core CPU: CI runs SHORT above)."""
    proc, found = tiny(tmp_path, fail="pytest")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert set(found) == set(PARTS)
    assert_each_part_ends_in_its_table_or_a_reason(found, failed="pytest")
    float8 = found["float8"]
    if "timed out" not in float8[0]:
        assert "skipped: runtime.float8=true needs a CUDA GPU" in float8[0]
        assert any(line.startswith("| bf16 | ") for line in float8)  # the bf16 halves ran
        assert any(line.startswith("| float8 | skipped: ") for line in float8)
    fused = found["fused_sweep"]
    if "timed out" not in fused[0]:
        assert fused[0].startswith(f"`{PARTS['fused_sweep'].tiny_what}`") and ": ok" in fused[0], fused
        assert [line.split(" | ")[0] for line in fused if line.startswith("| 1 ") or line.startswith("| 2 ")] == \
            ["| 1", "| 2"]
    doctor = found["doctor"]
    if doctor[0].startswith("`scripts/doctor.py`: ok"):
        assert "| check | result | detail |" in doctor and any("| skipped |" in line for line in doctor)


def test_the_report_names_machine_torch_and_date_and_the_summary_comes_last(tiny_run) -> None:
    proc, found = tiny_run
    line = f"CPU ({os.cpu_count()} cores), torch {torch.__version__}, "
    assert proc.stdout.count(line) >= len(found) + 1
    assert re.search(re.escape(line) + r"\d{4}-\d\d-\d\d", proc.stdout)
    summary = proc.stdout.rstrip().splitlines()
    assert summary[-1].startswith("report: ") and summary[-1].endswith("gpu_check.log")
    assert [row.split()[0] for row in summary[-1 - len(found):-1]] == list(found)


def test_a_spent_budget_starts_nothing_and_says_so(tmp_path: Path) -> None:
    """On a CPU a part the budget cannot start is skipped (the machine was too slow), not a failure: exit 0."""
    proc = gpu_check("--device", "cpu", "--tiny", "--budget", "0", "--parts", "doctor", "fit", out=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    found = sections((tmp_path / "gpu_check.md").read_text())
    assert all("skipped: not started: the run's 0 s budget was spent (this CPU ran a 1024^3 fp32 matmul at "
               in lines[0] for lines in found.values()), found
    assert found["fit"][0].startswith(f"`{PARTS['fit'].tiny_what}`: skipped"), found


def test_cpu_runs_only_at_toy_sizes(tmp_path: Path) -> None:
    proc = gpu_check("--device", "cpu", out=tmp_path)
    assert proc.returncode == 2 and "--device cpu runs only at toy sizes: add --tiny" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_on_a_gpu_each_part_is_a_fresh_interpreter_and_reports_the_same(monkeypatch) -> None:
    """The launcher a GPU run uses (python -m gptlab.tools.gpu_check.parts, its own process group), on a part that
    needs no GPU: its status comes back, and so does an injected crash's reason."""
    for key, value in child_env("", tiny=False).items():  # what the runner sets before its first part
        monkeypatch.setenv(key, value)
    for fail, status, reason in (([], "skipped", "the fused sweep's GPU rows need a CUDA GPU"),
                                 (["fused_sweep"], "failed", "exited 1: RuntimeError: failure injected")):
        log = io.StringIO()
        args = argparse.Namespace(device="cpu", tiny=False, fail=fail)
        result = run_part(PARTS["fused_sweep"], args, HANG_GUARD_S, log)
        assert (result.status, result.reason[:len(reason)]) == (status, reason), log.getvalue()[-2000:]
        assert "===== fused_sweep (exit " in log.getvalue()


def test_the_gpu_limits_fit_the_nine_minutes() -> None:
    assert GPU_BUDGET_S == 9 * 60
    assert sum(p.gpu_limit_s for p in PARTS.values()) <= GPU_BUDGET_S - 15  # the wheels' install before them


def test_pytest_summary_and_crash_lines_are_read() -> None:
    out = ("FAILED tests/test_gpu.py::test_a - AssertionError: x | y\nSKIPPED [3] tests/test_gpu.py:12: no CUDA\n"
           "1 failed, 5 passed, 3 skipped, 2 deselected in 94.31s\n")
    counts, lines = pytest_outcome(out)
    assert counts == {"failed": 1, "passed": 5, "skipped": 3, "deselected": 2}
    assert lines == ["FAILED tests/test_gpu.py::test_a - AssertionError: x \\| y",
                     "SKIPPED [3] tests/test_gpu.py:12: no CUDA"]
    crash = "Traceback (most recent call last):\n  File x\nValueError: bad shape\n\nProcess ended\n"
    assert crash_reason(crash, 1) == "exited 1: ValueError: bad shape"


def test_a_slow_cpu_stretches_the_tiny_limits_and_skips_what_its_budget_cannot_start() -> None:
    """Issue 55: a busy 2-core machine ran --tiny to "363 s of a 170 s budget" and exit 1. Its limits now stretch
    with the measured matmul rate, and a part the budget cannot start is skipped, saying how slow the CPU was."""
    fit = PARTS["fit"]
    assert stretch(REFERENCE_GFLOPS) == 1.0 and stretch(2 * REFERENCE_GFLOPS) == 1.0  # never shorter
    assert stretch(REFERENCE_GFLOPS / 3) == pytest.approx(3.0) and stretch(1.0) == MAX_STRETCH
    assert part_limit(fit, True, 1000, 0, 3.0)[0] == pytest.approx(fit.tiny_limit_s * 3.0)
    assert part_limit(fit, True, 170, 150, 3.0)[0] == pytest.approx(20)  # never past the budget
    limit, status, why = part_limit(fit, True, 170, 169, 3.0, "this CPU ran at 20 GFLOP/s")
    assert (limit, status) == (0.0, "skipped") and why == ("not started: the run's 170 s budget was spent (this CPU "
                                                           "ran at 20 GFLOP/s)")
    assert part_limit(fit, False, 540, 539)[1:] == ("failed", "not started: the run's 540 s budget was spent")
    assert part_limit(fit, False, 540, 0, 3.0)[0] == fit.gpu_limit_s  # a GPU part's limit is its own


def test_each_cpu_table_names_what_it_ran_at_toy_sizes() -> None:
    for part in PARTS.values():
        assert part.tiny_what and part.tiny_what != part.what, part.name
        assert part.described(True) == part.tiny_what and part.described(False) == part.what
        assert "--device cuda" not in part.tiny_what and "bf16;" not in part.tiny_what, part.name
