"""torch's intra-op threads follow the cores free for this process (gptlab.execution.threads, issue 55 item 3)."""

from __future__ import annotations

import pytest
import torch
from helpers import compose_config

from gptlab.config.validate import check
from gptlab.errors import ConfigError
from gptlab.execution import threads


@pytest.mark.parametrize("cores, ranks, busy, expected", [
    (2, 1, 0.0, 2),     # an idle 2-core machine: both
    (2, 1, 0.1, 2),     # a little background work does not take a core
    (2, 1, 1.0, 1),     # the other core busy (issue 55: 12.7 s at 2 threads, 3.5 s at 1)
    (2, 1, 0.6, 1),     # busy more than half the time counts as busy
    (2, 1, 7.5, 1),     # more busy than there are cores: still one thread
    (16, 4, 0.0, 4),    # 4 local ranks share 16 cores
    (16, 4, 4.0, 3),    # ... with 4 cores busy elsewhere
    (16, 3, 0.0, 5),    # an uneven split rounds down: the ranks never oversubscribe
    (2, 4, 0.0, 1),     # more ranks than cores: one each
    (8, 1, 0.0, 8),
    (1, 1, 0.0, 1),
])
def test_threads_are_the_free_cores_shared_among_the_ranks(cores, ranks, busy, expected) -> None:
    assert threads.choose_threads(cores, ranks, busy) == expected


def test_runtime_cpu_threads_overrides_the_choice(monkeypatch) -> None:
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.CHOSEN_ENV, raising=False)
    before = torch.get_num_threads()
    try:
        chosen = threads.apply(None, 1)
        assert (chosen.count, torch.get_num_threads()) == (2, 2)
        assert "2 usable cores, 0.0 busy at start, 1 local rank" in threads.banner_line(chosen)
        fixed = threads.apply(3, 1)
        assert (fixed.count, torch.get_num_threads()) == (3, 3)
        assert threads.banner_line(fixed).startswith("threads  3 intra-op CPU thread(s) (runtime.cpu_threads;")
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a count the user set outside is kept
        assert threads.decide(None, 1).why == "OMP_NUM_THREADS"
    finally:
        torch.set_num_threads(before)


def test_a_ddp_rank_takes_rank_zeros_count(monkeypatch) -> None:
    """Ranks > 0 start while rank 0 runs, which their own measure would count as busy."""
    monkeypatch.setenv(threads.CHOSEN_ENV, "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert threads.decide(None, 2) == threads.Threads(3, "rank 0's choice")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.decide(None, 1).count == 1  # rank 0 measures again (the next job of a sweep)


def test_busy_cores_reads_a_number_within_the_machine() -> None:
    import os

    assert 0.0 <= threads.busy_cores(0.01) <= (os.cpu_count() or 1)


@pytest.mark.parametrize("value", [0, -2])
def test_a_count_below_one_is_refused_naming_the_key(value, tmp_path) -> None:
    cfg = compose_config([f"runtime.cpu_threads={value}"], tmp_path)
    with pytest.raises(ConfigError, match="runtime.cpu_threads"):
        check(cfg)
