"""A worker process gptlab forks must die of SIGTERM even though its parent records SIGTERM as a preemption flag
(gptlab.signals): a worker that inherited the flag handler could not be ended by `Pool.terminate()`, and a test
(and a user's `data=text_files` run) hung for 12+ minutes. Each case really blocks a worker and signals it."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV

from gptlab.errors import ConfigError

# The parent installs the flag as src/train.py does, then starts a worker that writes its pid and blocks on a lock
# it already holds, as the hung pool worker did.
BLOCKING_WORKER = textwrap.dedent("""
    import os, sys, threading
    from pathlib import Path
    from gptlab.signals import FLAG

    FLAG.install()
    PID_FILE = Path(sys.argv[2])

    def block():
        tmp = PID_FILE.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.rename(PID_FILE)
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # never returns: only a signal that ends the process ends it

    class BlockingTokenizer:
        eot_id, vocab_size = 0, 1
        def encode(self, text):
            block()

    class BlockingDataset:
        def __len__(self):
            return 4
        def __getitem__(self, i):
            block()

    if sys.argv[1] == "pool":
        from gptlab.data.split import encode_batches
        list(encode_batches(iter([["a document"]]), BlockingTokenizer(), 0.5, num_proc=2))
    else:
        from torch.utils.data import DataLoader
        next(iter(DataLoader(BlockingDataset(), num_workers=1)))
""")


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its parent to reap it (the parent here is blocked on purpose)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds  # a generous hang guard, not a measurement
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.parametrize("kind", ["pool", "dataloader"])
def test_sigterm_ends_a_blocked_worker(tmp_path: Path, kind: str) -> None:
    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, "-c", BLOCKING_WORKER, kind, str(pid_file)], env=CHECKOUT_ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert _wait_for(pid_file.exists, 120), f"the worker never started: {parent.poll()}"
        worker = int(pid_file.read_text())
        assert worker != parent.pid and not _dead(worker)
        os.kill(worker, signal.SIGTERM)
        assert _wait_for(lambda: _dead(worker), 60), f"{kind} worker {worker} survived SIGTERM"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the parent waits for the lost task forever by design
        parent.wait()


def test_the_parent_still_records_sigterm() -> None:
    """The hook only acts in children: the process that installed the flag keeps recording signals."""
    from gptlab.signals import FLAG

    with FLAG.active():
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not FLAG.signum and time.monotonic() < deadline:
            time.sleep(0.01)
        assert FLAG.consume() == signal.SIGTERM


@contextlib.contextmanager
def blocked_pool_worker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    """(the parent, its pool worker's pid): a prepare pool whose worker is blocked inside a document for good; the
    whole process group is SIGKILLed afterwards."""
    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, "-c", BLOCKING_WORKER, "pool", str(pid_file)], env=CHECKOUT_ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert _wait_for(pid_file.exists, 120), f"the worker never started: {parent.poll()}"
        yield parent, int(pid_file.read_text())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)  # whatever is left of the group
        parent.wait()


def test_a_busy_pool_worker_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    """A SIGKILLed parent runs no cleanup; an idle worker then reads EOF from the task pipe and exits, but a busy
    one (here: blocked inside a document for good) would run on as an orphan without PR_SET_PDEATHSIG."""
    with blocked_pool_worker(tmp_path) as (parent, worker):
        parent.kill()
        parent.wait()
        assert _wait_for(lambda: _dead(worker), 60), f"pool worker {worker} outlived its SIGKILLed parent"


def test_a_pool_worker_ignores_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C signals the whole foreground group: the parent stops the pool, and workers must not each print a
    KeyboardInterrupt traceback. The kernel's mask of ignored signals says so without waiting on anything."""
    with blocked_pool_worker(tmp_path) as (_, worker):
        status = Path(f"/proc/{worker}/status").read_text().splitlines()
        ignored = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
        assert ignored & (1 << (signal.SIGINT - 1)) and not ignored & (1 << (signal.SIGTERM - 1))


# A SIGTERM that reaches a forked child before gptlab's fork hook has given it the default handler: the hook that
# sends it is registered before gptlab.signals is imported, so it runs first in the child.
SIGTERM_DURING_FORK = textwrap.dedent("""
    import os, signal
    os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
    from gptlab.signals import FLAG

    FLAG.install()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM)
""")


def test_a_sigterm_sent_during_the_fork_ends_the_child() -> None:
    """Pool.terminate right after the pool started (a bad line in the first batch) signals workers that may not have
    run their fork hook yet: the signal went to the parent's recording handler and was lost, and the worker hung
    the parent's join for good. The signals stay blocked until the child's handlers are the default ones."""
    done = subprocess.run([sys.executable, "-c", SIGTERM_DURING_FORK], env=CHECKOUT_ENV, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stdout + done.stderr


def _bad_line_documents(n_good: int):
    for i in range(n_good):
        yield f"document {i} " + "word " * 50
    raise ConfigError("corpus.jsonl:201 is not valid JSON; fix or drop that line.")


@pytest.mark.timeout(300)  # the hang guard: each round takes a fraction of a second
def test_a_pool_error_ends_the_pool_in_every_round() -> None:
    """The jsonl-with-a-bad-line case, 50 times, with the flag installed as src/train.py has it: the error comes
    while the pool is starting (the first batch) in some rounds and while batches are in flight in others."""
    from gptlab.data.split import doc_batches, encode_batches
    from gptlab.data.tokenizers import ByteTokenizer
    from gptlab.signals import FLAG

    with FLAG.active():
        for round_ in range(50):
            batches = doc_batches(_bad_line_documents(200 if round_ % 2 else 3000))
            with pytest.raises(ConfigError, match="not valid JSON"):
                for _ in encode_batches(batches, ByteTokenizer(), 0.1, num_proc=2):
                    pass
            assert not multiprocessing.active_children(), f"round {round_}: pool workers left running"


@pytest.mark.parametrize("num_proc", [1, 2])
def test_a_recorded_sigterm_stops_tokenizing_between_batches(num_proc: int) -> None:
    """src/train.py records SIGTERM instead of dying (gptlab.signals); before training starts, tokenizing the corpus
    acts on it at the next batch, not after the whole corpus and a first training step."""
    from gptlab.data.split import doc_batches, encode_batches
    from gptlab.data.tokenizers import ByteTokenizer
    from gptlab.errors import StoppedBySignal
    from gptlab.signals import FLAG

    def documents():
        for i in range(100_000):  # far more than is read before the stop
            if i == 600:
                os.kill(os.getpid(), signal.SIGTERM)
            yield f"document {i} " + "word " * 20

    with FLAG.active(), pytest.raises(StoppedBySignal, match="SIGTERM while tokenizing") as stopped:
        for _ in encode_batches(doc_batches(documents()), ByteTokenizer(), 0.1, num_proc=num_proc):
            pass
    assert stopped.value.signum == signal.SIGTERM and not multiprocessing.active_children()


def test_a_recorded_sigterm_stops_the_shard_check_before_training(tmp_path: Path) -> None:
    """Hashing the prepared shards (data.verify_sha256) takes minutes on a large corpus; a signal recorded then is
    acted on at the next shard too."""
    from gptlab.data.prepare import load_prepared, prepare
    from gptlab.data.sources import TextFiles
    from gptlab.data.tokenizers import ByteTokenizer
    from gptlab.errors import StoppedBySignal
    from gptlab.signals import FLAG

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(f'{{"text": "document {i} {"word " * 30}"}}\n' for i in range(400)))
    prepare(TextFiles([str(corpus)]), ByteTokenizer(), tmp_path / "cache", val_fraction=0.1, progress=False)
    with FLAG.active():
        FLAG.signum = signal.SIGTERM  # as the handler records it
        with pytest.raises(StoppedBySignal, match="SIGTERM while checking the prepared shards"):
            load_prepared(tmp_path / "cache", ByteTokenizer())
        assert not FLAG.signum  # consumed: the next run of this process starts clean
