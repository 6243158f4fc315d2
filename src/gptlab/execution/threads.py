"""torch's intra-op threads for the cores this process may use. torch starts one per core of the machine, whoever
else runs there: with the other core of a 2-core machine busy, each backward waits on a thread the kernel has
descheduled (issue 55: a tiny run took 12.7 s at 2 threads, 3.5 s at 1). gptlab sets them from the cores in this
process's affinity, less those busy at start, shared among the local ranks; runtime.cpu_threads fixes the count."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

import torch

CHOSEN_ENV = "GPTLAB_CPU_THREADS"  # rank 0's count, inherited by the DDP ranks it starts (they would see it busy)


@dataclass(frozen=True)
class Threads:
    count: int
    why: str  # for the banner


def choose_threads(usable_cores: int, local_ranks: int, busy_cores: float) -> int:
    """Threads per rank: the usable cores not busy with other work (a core counts busy from half its time), shared
    evenly among this machine's ranks; at least 1."""
    free = usable_cores - min(usable_cores, int(busy_cores + 0.5))
    return max(1, free // max(1, local_ranks))


def busy_cores(seconds: float = 0.1) -> float:
    """Cores kept busy by other processes, from /proc/stat over `seconds` while this process sleeps; the 1-minute
    load average where /proc/stat cannot be read (it lags a load that just began)."""
    try:
        first = _cpu_times()
        time.sleep(seconds)
        second = _cpu_times()
    except (OSError, ValueError, IndexError):
        return min(os.getloadavg()[0], float(os.cpu_count() or 1))
    total, idle = second[0] - first[0], second[1] - first[1]
    return (os.cpu_count() or 1) * (1 - idle / total) if total > 0 else 0.0


def _cpu_times() -> tuple[int, int]:
    """(all jiffies, idle + iowait jiffies) of every core, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]


def usable_cores() -> int:
    """The cores this process may run on (its affinity: taskset, a cgroup's cpuset, a SLURM allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def decide(fixed: Optional[int], local_ranks: int) -> Threads:
    """runtime.cpu_threads when set; else OMP_NUM_THREADS when the user set it; else the cores free at start."""
    if fixed is not None:
        return Threads(fixed, "runtime.cpu_threads")
    if os.environ.get(CHOSEN_ENV, "").isdigit() and int(os.environ.get("LOCAL_RANK", "0")) > 0:
        return Threads(int(os.environ[CHOSEN_ENV]), "rank 0's choice")
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return Threads(torch.get_num_threads(), "OMP_NUM_THREADS")
    cores, busy = usable_cores(), busy_cores()
    count = choose_threads(cores, local_ranks, busy)
    return Threads(count, f"{cores} usable cores, {busy:.1f} busy at start, {local_ranks} local rank(s)")


def apply(fixed: Optional[int], local_ranks: int) -> Threads:
    """Set torch's intra-op threads for this run and return what was chosen and why (the banner's line)."""
    threads = decide(fixed, local_ranks)
    torch.set_num_threads(threads.count)
    os.environ[CHOSEN_ENV] = str(threads.count)
    return threads


def banner_line(threads: Threads) -> str:
    return (f"threads  {threads.count} intra-op CPU thread(s) ({threads.why}; runtime.cpu_threads=N sets the "
            "count)")
