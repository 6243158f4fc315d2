"""The main process's watcher (gptlab.launch.death_watch) on a real dummy parent killed by a real SIGKILL: a rise
of the OOM-kill counter names the OOM killer with the memory way out, no rise names a kill from outside or a crash
with no memory claim, an orderly exit prints nothing, and the group's signals leave the watcher alone (issue 46:
an OOM-killed main process printed nothing; the shell said "Killed")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, ROOT

from gptlab.launch import death_watch, death_watcher

# A parent that starts the watcher with `spec` (no torch: it starts in milliseconds), says the watcher's pid, then
# ends in order when told "bye", or waits to be killed.
PARENT = """
import json, sys
from gptlab.launch import death_watch as watch
started = watch.start(json.loads(sys.argv[1]))
print(started.process.pid, flush=True)
if sys.stdin.readline().strip() == "bye":
    watch.bye()
"""


def parent(tmp_path: Path, checkpoint_dir: Path) -> tuple[subprocess.Popen, int, Path]:
    """A dummy training process watched with a fake counter file (at 3 OOM kills): (it, its watcher's pid, the
    counter file)."""
    counter = tmp_path / "vmstat"
    counter.write_text("pgfault 10\noom_kill 3\n")
    spec = {"counters": [str(counter)], "checkpoint_dirs": [str(checkpoint_dir)], "oom": "OOM LINE",
            "abrupt": "ABRUPT LINE", "saved": "RESUME", "unsaved": "RUN AGAIN"}
    proc = subprocess.Popen([sys.executable, "-S", "-c", PARENT, json.dumps(spec)], env=CHECKOUT_ENV,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline()), counter


def ignoring_signals(pid: int) -> bool:
    """Whether process `pid` has set death_watcher.IGNORED aside (its SigIgn mask in /proc)."""
    for _ in range(200):
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
        mask = int(line.split()[1], 16)
        if all(mask >> (signum - 1) & 1 for signum in death_watcher.IGNORED):
            return True
        time.sleep(0.01)
    return False


def killed(proc: subprocess.Popen) -> str:
    """SIGKILL the parent; its stderr, which the watcher shares, up to the watcher's end."""
    proc.kill()
    _, err = proc.communicate(timeout=10)  # ends when the watcher, which shares it, has ended too
    return err


@pytest.mark.parametrize("bumped", [True, False], ids=["oom-counter-rose", "no-rise"])
def test_a_killed_parent_is_named_by_its_watcher(tmp_path: Path, bumped: bool) -> None:
    proc, watcher, counter = parent(tmp_path, tmp_path / "checkpoints")
    assert ignoring_signals(watcher)
    # its spec came on stdin: a `pkill -f <words of the run's command>` (its resume line repeats them) spares it
    assert "RESUME" not in Path(f"/proc/{watcher}/cmdline").read_text()
    for signum in death_watcher.IGNORED:  # a Ctrl-C or a scheduler's signal: the parent answers it, not the watcher
        os.kill(watcher, signum)
    if bumped:
        counter.write_text("pgfault 12\noom_kill 4\n")
    err = killed(proc)
    assert err.strip() == ("OOM LINE. RUN AGAIN" if bumped else
                           "ABRUPT LINE (the kernel's OOM-kill counter did not rise). RUN AGAIN"), err


def test_resume_is_offered_once_a_checkpoint_was_written(tmp_path: Path) -> None:
    proc, _, _ = parent(tmp_path, tmp_path / "checkpoints")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")  # written during the run
    assert killed(proc).strip().endswith(". RESUME")


def test_an_orderly_exit_prints_nothing_and_ends_the_watcher_at_once(tmp_path: Path) -> None:
    proc, watcher, _ = parent(tmp_path, tmp_path / "checkpoints")
    began = time.monotonic()
    _, err = proc.communicate("bye\n", timeout=10)
    assert err == "" and proc.returncode == 0
    assert time.monotonic() - began < 2.0
    assert not Path(f"/proc/{watcher}").exists(), "the watcher outlived the run"  # reaped by bye()


def test_the_words_name_the_memory_way_out_and_how_to_go_on(tmp_path: Path, monkeypatch) -> None:
    """The lines the entry script gives its watcher: the OOM words rank_watch uses (one home) with half the batch,
    and no memory claim for an abrupt end."""
    from helpers import compose_tiny

    cfg = compose_tiny(tmp_path / "run", "data.batch_size=8")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "src" / "train.py")])
    spec = death_watch.words(cfg)
    assert "most likely by the kernel's OOM killer" in spec["oom"] and "data.batch_size=4" in spec["oom"]
    assert "trainer.devices" not in spec["oom"]  # one process: no ranks to take away
    assert "OOM" not in spec["abrupt"] and "memory" not in spec["abrupt"]
    assert "resume=auto" in spec["saved"] and "nothing to resume" in spec["unsaved"]
    assert spec["checkpoint_dirs"] == [str(tmp_path / "run" / "checkpoints")]
    with death_watch.watching(cfg):  # the run's main process: watched for its duration, the watcher reaped after
        watcher = death_watch._CURRENT.process
    assert watcher.returncode == 0 and death_watch._CURRENT is None
    monkeypatch.setenv("LOCAL_RANK", "1")  # a DDP rank > 0, as Lightning starts it: rank_watch names it instead
    with death_watch.watching(cfg):
        assert death_watch._CURRENT is None


def test_the_oom_line_s_ways_out_pass_the_checks_when_typed(tmp_path: Path, monkeypatch) -> None:
    """The suggestion follower types the OOM line's ways out (half the batch, activation checkpointing) into the
    command: each passes train's checks."""
    import ways_out
    from helpers import TINY, compose_tiny

    command = (*(o for o in TINY if not o.startswith("data.batch_size=")), "data.batch_size=8")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "src" / "train.py"), *command])
    spec = death_watch.words(compose_tiny(tmp_path / "run", "data.batch_size=8"))
    typed = ways_out.ways_out(f"{spec['oom']}. {spec['unsaved']}", command).ways
    assert {w.said for w in typed} >= {"data.batch_size=4", "runtime.activation_checkpointing=true"}, typed
    for way in typed:
        assert ways_out.refusal(way.command) is None, way


def test_a_run_killed_mid_training_says_so_through_its_watcher(tmp_path: Path) -> None:
    """A real run (forked from the test zygote), with a DataLoader worker, SIGKILLed as step 1 begins: the line
    comes at once (the worker's copy of the pipe was closed when it forked: else it would wait for the worker's own
    end, ~5 s later). An orderly end's silence is the dummy parent's test above: one run less (CI time)."""
    from helpers import TINY, ZYGOTE

    log = tmp_path / "killed.log"
    argv = [sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={tmp_path / 'run'}", *TINY,
            "trainer.max_steps=2", "data.num_workers=1", "+callbacks.kill._target_=helpers.KillAtStep",
            "+callbacks.kill.step=1"]
    oom_before = death_watcher.oom_kills([death_watcher.VMSTAT])
    proc = (ZYGOTE.popen(argv, tmp_path, dict(CHECKOUT_ENV), log) if ZYGOTE.usable() else
            subprocess.Popen(argv, cwd=tmp_path, env=CHECKOUT_ENV, stdout=log.open("w"), stderr=subprocess.STDOUT))
    code, ended = proc.wait(timeout=600), time.monotonic()
    assert code == -signal.SIGKILL
    line = ""
    while "gptlab: the run's main process" not in line and time.monotonic() - ended < 10:
        time.sleep(0.05)
        line = next((x for x in log.read_text().splitlines() if "main process" in x), "")
    assert time.monotonic() - ended < 2.5, "the pipe stayed open after the run died"
    if death_watcher.oom_kills([death_watcher.VMSTAT]) == oom_before:  # no OOM kill on this machine meanwhile
        assert "was killed from outside (SIGKILL) or crashed (the kernel's OOM-kill counter did not rise)" in line
    assert line.endswith("No checkpoint was written yet, so there is nothing to resume: once fixed, run the "
                         "command again."), line
