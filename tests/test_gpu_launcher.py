"""hydra/launcher=local_gpus fills a machine's GPUs with a sweep's jobs: each job on its own ids from the pool
(CUDA_VISIBLE_DEVICES), never two on one id at once, the next one starting as ids free up, and a failing job (or
one whose process is killed) stopping none of the others. The pool is given as fake ids, so no GPU is needed; the
order is read from events the jobs record, never from timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CONF_DIR, TESTS, TINY_RUN, run_script, run_train

from gptlab.errors import ConfigError
from gptlab.launch.gpu_launcher import device_pool
from gptlab.report.runs import write_report
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE

APP = TESTS / "fixtures" / "gpu_pool_app" / "app.py"


def replay(events: list[str]) -> dict[int, list[str]]:
    """Each job's ids, checking that no id is taken by a job while another holds it."""
    holder: dict[str, int] = {}
    ids: dict[int, list[str]] = {}
    for line in events:
        kind, job, *rest = line.split()
        if kind == "start":
            ids[int(job)] = rest[0].split(",")
            for device in ids[int(job)]:
                assert device not in holder, f"job {job} started on {device} while job {holder[device]} held it"
                holder[device] = int(job)
        elif kind == "end":
            for device in ids[int(job)]:
                del holder[device]
    return ids


def test_four_jobs_share_two_fake_gpus_and_a_failing_job_stops_none(tmp_path: Path) -> None:
    events = tmp_path / "events.log"
    proc = run_script(str(APP), ["-m", "job=0,1,2,3", "hydra/launcher=local_gpus", f"events={events}",
                                 f"hydra.searchpath=[file://{CONF_DIR}]", "hydra.launcher.device_ids=[0,1]",
                                 "hydra.launcher.poll_s=0.2", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert "job 1 fails on purpose" in proc.stderr and proc.returncode != 0, proc.stderr[-3000:]  # reported at the end
    lines = events.read_text().splitlines()
    assert not [line for line in lines if line.startswith("alone")], lines  # jobs 0 and 1 ran at the same time
    ids = replay(lines)
    assert sorted(ids) == [0, 1, 2, 3] and all(len(i) == 1 and i[0] in ("0", "1") for i in ids.values()), ids
    assert [line.split()[1] for line in lines if line.startswith("end")].count("1") == 1
    ended = {int(line.split()[1]) for line in lines if line.startswith("end")}
    assert ended == {0, 1, 2, 3}  # the jobs after the failing one ran to their end
    failed_at = lines.index(f"end 1 {ids[1][0]}")
    assert any(line.startswith("start") and line.split()[2] == ids[1][0] for line in lines[failed_at:])  # freed
    died = json.loads((tmp_path / "sweep" / "2" / FAILURE_FILE).read_text())  # killed: recorded like a failed job
    assert died["kind"] == "died" and "without a result" in died["reason"] and ".submitit" in died["reason"], died


def test_the_pool_is_checked_before_any_job_starts(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert device_pool(None, 1) == [2, 3]  # the GPUs this machine lends the sweep
    with pytest.raises(ConfigError, match=r"each job needs trainer.devices=3 GPUs but the pool has 2 \(\[2, 3\]\)"):
        device_pool(None, 3)
    with pytest.raises(ConfigError, match="must be distinct GPU numbers"):
        device_pool([0, 0], 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match=r"this machine has none .* hydra.launcher.device_ids=\[0,1\]"):
        device_pool(None, 1)


@pytest.mark.slow  # four training processes (two jobs, launched twice): 7 min on the loaded 2-core machine
def test_a_train_sweep_on_fake_gpus_reports_and_a_relaunch_skips_its_finished_jobs(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", *TINY_RUN, "trainer.max_steps=2", "trainer.val_check_interval=2", "callbacks.text_samples=null",
            "model.norm=pre,post", "hydra/launcher=local_gpus", "hydra.launcher.device_ids=[0,1]",
            "hydra.launcher.poll_s=0.2", f"hydra.sweep.dir={sweep}"]
    first = run_train(args, cwd=tmp_path, threads=1)
    assert first.returncode == 0, first.stderr[-3000:]
    summaries = {job: (sweep / job / SUMMARY_FILE).stat().st_mtime_ns for job in ("0", "1")}
    table, _plot = write_report(sweep)  # the ablation report reads the sweep as any other
    rows = [line for line in table.read_text().splitlines() if line.startswith(("| 0 ", "| 1 "))]
    assert len(rows) == 2 and "| pre |" in rows[0] and "| post |" in rows[1], rows

    again = run_train(args, cwd=tmp_path, threads=1)
    assert again.returncode == 0, again.stderr[-3000:]
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.*"))
    assert logs.count("already finished") == 2, logs[-3000:]  # each job, in its own process's log
    assert {job: (sweep / job / SUMMARY_FILE).stat().st_mtime_ns for job in ("0", "1")} == summaries  # untouched
