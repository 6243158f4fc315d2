"""`scripts/prepare_data.py` killed with SIGKILL at chosen moments resumes to the bytes of an uninterrupted run,
and its tokenizing workers die with it.

The moment is deterministic, not a sleep: the script runs under a hook that stops it (SIGSTOP) at the n-th shard
batch or just before or after the n-th rename of a given file; the test waits for the stop, then kills it. CI runs
one moment (mid-tokenizing: workers busy, a shard half written in its temp file);
`-m slow` runs them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, HANG_GUARD_S, ROOT

from gptlab.data.prepare import prepare
from gptlab.data.sources import TextFiles
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.tools.benchmarks.synthetic_corpus import write_corpus

SHARD_TOKENS = 2_000_000  # a cut every two batches of the default ~1M characters: 6 train shards, 6 val shards

# The hook: the real script through runpy, with os.replace (the rename that puts a file in place) or the writer's
# add wrapped to stop the process at the chosen moment.
STOPPER = textwrap.dedent("""
    import os, re, runpy, signal, sys
    moment, pattern, nth, script = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    seen = [0]

    def stop():
        seen[0] += 1
        if seen[0] == nth:
            os.kill(os.getpid(), signal.SIGSTOP)

    if moment == "add":
        from gptlab.data import shard_writer
        add = shard_writer.ShardWriter.add
        shard_writer.ShardWriter.add = lambda self, encoded: (stop(), add(self, encoded))
    else:
        real = os.replace
        def replace(src, dst, *args, **kwargs):
            hit = re.fullmatch(pattern, os.path.basename(dst))
            if hit and moment == "before":
                stop()
            real(src, dst, *args, **kwargs)
            if hit and moment == "after":
                stop()
        os.replace = replace
    sys.argv = [script, *sys.argv[5:]]
    runpy.run_path(script, run_name="__main__")
""")

# name: (hook, file name pattern, n-th occurrence, whether the pool's workers are alive then)
MOMENTS = {
    "tokenizing, a shard half written": ("add", "", 4, True),
    "a whole shard not yet renamed": ("before", r"train_\d+\.bin", 2, True),
    "train shard renamed, val shard not": ("after", r"train_\d+\.bin", 2, True),
    "between shards (progress written)": ("after", r"progress\.json", 2, True),
    "during the manifest write": ("before", r"manifest\.json", 1, False),
    "manifest written, progress.json not yet removed": ("after", r"manifest\.json", 1, False),
}
IN_CI = ("tokenizing, a shard half written",)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Path]:
    return write_corpus(tmp_path_factory.mktemp("corpus"), 12 << 20, file_bytes=4 << 20)


@pytest.fixture(scope="module")
def clean(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clean")
    prepare_here(corpus, out)
    return out / "bytes"


def prepare_here(corpus: list[Path], cache: Path) -> dict:
    """What the script does with the overrides of `script_args`, in this process."""
    return prepare(TextFiles([str(p) for p in corpus]), ByteTokenizer(), cache, val_fraction=0.1,
                   shard_tokens=SHARD_TOKENS, num_proc=2, progress=False)


def script_args(corpus: list[Path], cache: Path) -> list[str]:
    return ["data=text_files", f"data.source.paths=[{','.join(map(str, corpus))}]", f"data.cache_dir={cache}",
            "data.val_fraction=0.1", f"data.shard_tokens={SHARD_TOKENS}", "data.num_proc=2", "tokenizer=bytes"]


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def gone(pid: int) -> bool:
    """Exited, or a zombie waiting to be reaped: either way no longer running."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_stopped(victim: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard, not a measurement
    while time.monotonic() < deadline:
        pid, status = os.waitpid(victim.pid, os.WUNTRACED | os.WNOHANG)
        if pid:
            assert os.WIFSTOPPED(status), f"the script ended before the moment came:\n{log.read_text()[-3000:]}"
            return
        time.sleep(0.05)
    raise AssertionError("the script neither stopped nor ended")


def kill_at(moment: str, corpus: list[Path], cache: Path, tmp_path: Path) -> list[int]:
    """Run the script until the moment, SIGKILL it there; return the pids of its workers at that moment."""
    hook, pattern, nth, _ = MOMENTS[moment]
    log = tmp_path / "victim.log"
    with open(log, "w") as stderr:
        victim = subprocess.Popen(
            [sys.executable, "-c", STOPPER, hook, pattern, str(nth), str(ROOT / "scripts" / "prepare_data.py"),
             *script_args(corpus, cache)], cwd=tmp_path, env=CHECKOUT_ENV, stdout=stderr, stderr=stderr)
    try:
        wait_stopped(victim, log)
        workers = children(victim.pid)
    finally:
        victim.kill()
        victim.wait()
    return workers


def stamps(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.glob("*.bin")}


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def check_kill_and_resume(moment: str, corpus: list[Path], clean: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    workers = kill_at(moment, corpus, cache, tmp_path)
    out = cache / "bytes"
    assert len(workers) == (2 if MOMENTS[moment][3] else 0), workers
    deadline = time.monotonic() + HANG_GUARD_S
    while not all(map(gone, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(gone, workers)), f"workers {workers} outlived their killed parent"
    before = stamps(out)
    assert before, "nothing was in place at the kill: the moment came too early to test a resume"
    prepare_here(corpus, cache)
    assert files_of(out) == files_of(clean)  # byte-identical, and no progress.json or temp file left
    after = stamps(out)
    kept = [name for name in before if after[name] == before[name]]
    assert "train_000000.bin" in kept  # resumed: shards finished before the kill were not written again


@pytest.mark.parametrize("moment", IN_CI)
def test_killed_prepare_resumes_to_the_same_bytes(moment, corpus, clean, tmp_path):
    check_kill_and_resume(moment, corpus, clean, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("moment", [m for m in MOMENTS if m not in IN_CI])
def test_killed_prepare_resumes_at_every_moment(moment, corpus, clean, tmp_path):
    check_kill_and_resume(moment, corpus, clean, tmp_path)


# The real entry script through runpy, with the shard writer's add wrapped to send the process a signal at the
# second batch, as a scheduler's SIGTERM or a user's Ctrl-C would come in the middle of tokenizing.
SIGNALLER = textwrap.dedent("""
    import os, runpy, signal, sys
    from gptlab.data import shard_writer

    signum, script, seen, add = getattr(signal, sys.argv[1]), sys.argv[2], [0], shard_writer.ShardWriter.add
    # As in a terminal: a process started in the background by a non-interactive shell (a CI job, `cmd &`) inherits
    # SIGINT ignored, and Python then keeps it ignored, so Ctrl-C would never arrive.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def add_then_signal(self, encoded):
        add(self, encoded)
        seen[0] += 1
        if seen[0] == 2:
            os.kill(os.getpid(), signum)

    shard_writer.ShardWriter.add = add_then_signal
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")
""")


def signalled(signal_name: str, script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SIGNALLER, signal_name, str(ROOT / script), *args], cwd=cwd,
                          env=CHECKOUT_ENV, capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_sigterm_while_train_prepares_its_data_stops_before_training(corpus, tmp_path):
    """src/train.py records SIGTERM (gptlab.signals) so that training can save and stop; during its own data
    preparation nothing was acted on until the whole corpus was tokenized and a step had run."""
    run = tmp_path / "run"
    args = [*script_args(corpus, tmp_path / "cache"), "data.store=prepared", "model.n_layer=1", "model.n_head=2",
            "model.n_embd=32", "model.block_size=32", "trainer.accelerator=cpu", "trainer.max_steps=2",
            "callbacks.progress_bar=null", f"hydra.run.dir={run}"]
    done = signalled("SIGTERM", "src/train.py", args, tmp_path)
    assert done.returncode == 128 + 15, done.stderr[-3000:]
    assert "gptlab: stopped: SIGTERM while tokenizing the corpus" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not list(run.rglob("*.ckpt"))  # no training step was run


def test_ctrl_c_in_prepare_data_is_one_message(corpus, tmp_path):
    done = signalled("SIGINT", "scripts/prepare_data.py", script_args(corpus, tmp_path / "cache"), tmp_path)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith("gptlab: interrupted (Ctrl-C)"), done.stderr[-3000:]
