"""The report on a sweep dir it can read at all never shows a traceback (issue 46 item 5): a read-only sweep dir
(the report goes elsewhere and says where; it is printed), event files without events, a job without events; and
two reports of one sweep at once (item 2): the second waits for the first. The script runs in this process on tiny
sweeps of fake jobs (test_report_stats.make_job)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

import pytest
from test_report_stats import make_job
from test_ways_out_runs import script_main

from gptlab.report import output_dir
from gptlab.report.output_dir import one_report_writer


def sweep(root: Path) -> Path:
    made = root / "sweep"
    for i, (norm, seed) in enumerate([("pre", 1), ("pre", 2), ("post", 1), ("post", 2)]):
        make_job(made, i, {"model.norm": norm, "seed": str(seed)}, [3.5 + 0.1 * i, 3.0 + 0.1 * i])
    return made


def report(*argv: str) -> tuple[str, str]:
    """(stdout, stderr) of `python scripts/ablation_report.py <argv>`, which must succeed."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "argv", ["scripts/ablation_report.py", *argv]), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        script_main("ablation_report.py")()
    return out.getvalue(), err.getvalue()


def test_event_files_without_events_and_jobs_without_any(tmp_path: Path) -> None:
    made = sweep(tmp_path)
    (made / "1" / "tensorboard" / "events.out.tfevents.0.empty").write_bytes(b"")  # sorts first: the oldest
    for path in (made / "3" / "tensorboard").iterdir():
        path.write_bytes(b"")  # a job whose events were never written
    printed, _ = report(str(made))
    assert "## Verdicts" in printed
    assert (made / "ablation_report.md").is_file()


@pytest.fixture
def read_only(tmp_path: Path):
    """A sweep on a filesystem mounted read-only (root with CAP_SYS_ADMIN, as CI's container) or in a dir without
    write permission (anyone else): either way the sweep dir cannot be written."""
    made = sweep(tmp_path / "src")
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
                             capture_output=True).returncode == 0
    subprocess.run(["cp", "-a", str(made), str(mount_point)], check=True)
    if mounted:
        subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
    else:
        (mount_point / "sweep").chmod(0o555)
    output_dir.report_dir.cache_clear()
    yield mount_point / "sweep"
    if mounted:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
    else:
        (mount_point / "sweep").chmod(0o755)


def test_a_read_only_sweep_dir_gets_its_report_elsewhere_said_and_printed(read_only: Path) -> None:
    printed, said = report(str(read_only))
    assert "## Verdicts" in printed
    assert f"gptlab: {read_only} cannot be written (read-only); the report goes to " in said
    elsewhere = Path(said.split("the report goes to ", 1)[1].split(" instead")[0])
    assert (elsewhere / "ablation_report.md").read_text() in printed
    assert (elsewhere / "val_loss.png").is_file()
    assert f"wrote {elsewhere / 'ablation_report.md'}" in printed


def test_a_second_report_of_one_sweep_waits_for_the_first(tmp_path: Path) -> None:
    made = sweep(tmp_path)
    output_dir.report_dir.cache_clear()
    holding, done = threading.Event(), threading.Event()

    def first() -> None:
        with one_report_writer(made):
            holding.set()
            assert done.wait(600)

    holder = threading.Thread(target=first)
    holder.start()
    assert holding.wait(600)
    result: dict[str, tuple[str, str]] = {}
    second = threading.Thread(target=lambda: result.setdefault("second", report(str(made))))
    with mock.patch.object(output_dir, "print", create=True) as said:  # what the waiting report says
        second.start()
        while not said.called and second.is_alive():
            second.join(0.05)
        assert said.called and "is being written" in said.call_args.args[0]
        assert "second" not in result  # it waits: the first still holds the sweep
        done.set()
        second.join(600)
    holder.join(600)
    assert "## Verdicts" in result["second"][0]
    assert not (made / output_dir.LOCK_FILE).exists()


def test_a_file_given_as_the_sweep_dir_is_named_as_a_file(tmp_path: Path) -> None:
    """ablation_report.py <a run's run_summary.json> said the sweep dir "does not exist"."""
    from gptlab.errors import ConfigError
    from gptlab.report.runs import load_sweep

    given = tmp_path / "run_summary.json"
    given.write_text("{}")
    with pytest.raises(ConfigError, match="is a file, not a dir; pass the dir"):
        load_sweep(given)
