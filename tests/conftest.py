"""Fixtures only; every shared helper lives in helpers.py.

The Hugging Face hub is unreachable here: offline mode makes `datasets` fail at once instead of retrying for
half a minute, which is also what users get with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Under pytest-xdist each worker gets its share of the cores for torch's threads, its training subprocesses too
# (they inherit the variable): workers that each spin a thread per core would fight over the cores.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from helpers import ROOT, write_corpus  # noqa: E402

# The signals an entry script answers (gptlab.entry_signals): a test that runs a script in this process (runpy)
# installs its handlers here, and a later signal to this worker (pytest-xdist's own shutdown, a test's signal to its
# process group) would then end the worker as if it were that script.
ENTRY_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _worker_signal_handlers_kept():
    """Each test leaves this process's signal handlers and excepthook as it found them."""
    entry = sys.modules.get("gptlab.entry_signals")
    for signum in ENTRY_SIGNALS:  # an entry script's handlers, left by an earlier test's in-process script: off
        if entry is not None and signal.getsignal(signum) is getattr(entry, "_on_signal", None):
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    if entry is not None and sys.excepthook is getattr(entry, "_excepthook", None):
        sys.excepthook = sys.__excepthook__
    handlers, hook = {s: signal.getsignal(s) for s in ENTRY_SIGNALS}, sys.excepthook
    flag = getattr(sys.modules.get("gptlab.signals"), "FLAG", None)
    flagged = flag is not None and flag.installed
    yield
    flag = getattr(sys.modules.get("gptlab.signals"), "FLAG", None)
    if flag is not None and flag.installed and not flagged:  # an in-process train.py installs it for good
        flag.restore()
    for signum, handler in handlers.items():
        if signal.getsignal(signum) is not handler and handler is not None:
            signal.signal(signum, handler)
    sys.excepthook = hook
    if flag is not None:  # a fit of this test that was signalled leaves no grace deadline to a later test's fit
        flag.overdue = flag.busy_since = None

SLOW_TEST_TIMEOUT_S = 4 * 3600  # the full drills and every README command: hours on a shared 2-core CPU


# The files with the longest runs (multi-process DDP jobs, sweeps, drills), scheduled first: pytest-xdist hands files
# to workers in collection order, and a long file collected last keeps one worker busy while the others idle.
# Only the order changes; a file missing here runs in its alphabetical place.
LONGEST_FIRST = (  # by their time in a full run on 2 cores (2026-12-02), longest first
    "test_campaign_server.py", "test_ways_out.py", "test_fused.py", "test_ray_launcher.py",
    "test_campaign_launchers.py", "test_sweeps.py", "test_readme.py", "test_ways_out_data.py",
    "test_ways_out_runs.py", "test_gpu_launcher.py", "test_preemption.py", "test_tensorboard_browser.py",
    "test_sparse_attention.py", "test_lm_eval_adapter.py", "test_campaign_ledger.py", "test_stop_signals.py",
    "test_config_check.py", "test_prepare_kill.py", "test_gpu_check.py", "test_modern_toggles.py", "test_presets.py",
    "test_compile.py", "test_checkpointing.py", "test_ways_out_files.py", "test_mlflow_store.py", "test_walk.py",
    "test_loggers.py", "test_speedrun_choices.py", "test_script_arguments.py", "test_config_schemas.py",
    "test_prepare_memory.py", "test_run_dir_lock.py", "test_sweep_failures.py", "test_ladder.py",
    "test_report_stats.py", "test_bench_fsdp.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (LONGEST_FIRST); tests marked `slow` get a hang guard of hours instead of
    pyproject's (unless they set their own); tests marked `gpu` run where CUDA is present and are skipped, with the
    reason, where it is not."""
    import torch

    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order

    for item in items:
        if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT_S))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine); run `python scripts/doctor.py` on one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpt2_ranks() -> Path:
    """GPT-2's ranks, fetched from PyPI (openai-whisper sdist) into data/cache/tiktoken once and sha256-checked.
    No skip: if PyPI cannot be reached, every test that needs the real GPT-2 tokenizer errors."""
    from gptlab.data.ranks import fetch_gpt2_ranks

    return fetch_gpt2_ranks(ROOT / "data" / "cache" / "tiktoken")


@pytest.fixture(scope="session")
def gpt2(gpt2_ranks):
    from gptlab.data.tokenizers import TiktokenTokenizer

    return TiktokenTokenizer("gpt2", ranks_file=str(gpt2_ranks))


@pytest.fixture
def corpus(tmp_path) -> list[Path]:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture
def small_disk(tmp_path):
    """(dir, real): a 16 MB tmpfs mounted for the test where this process may mount one (root with CAP_SYS_ADMIN,
    as in CI's container), so "disk full" and "another filesystem than $TMPDIR" are real; else a plain dir and
    real=False, and the tests inject the failures instead."""
    import subprocess

    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)]
    # GPTLAB_TEST_NO_MOUNT=1 tries the fallback (injected failures) where mounting works.
    mounted = not os.environ.get("GPTLAB_TEST_NO_MOUNT") and subprocess.run(mount, capture_output=True).returncode == 0
    yield mount_point, mounted
    if mounted:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
