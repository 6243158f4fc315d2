"""gptlab's choice of torch's intra-op threads (gptlab.execution.threads) against every fixed count, with the
machine as found and with all but one of this process's cores kept busy by busy-loop processes this benchmark
starts (and ends). Each measurement is a fresh process (so `auto` measures the load at its own start, as a run
does) timing training steps of the nano model by the wall clock, which is what a descheduled thread costs; rounds
interleave the contenders and each keeps its median. Goal: auto never slower than the best fixed count."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from gptlab.execution.threads import usable_cores
from gptlab.tools.benchmarks.prepare import cpu_name

ROOT = Path(__file__).resolve().parents[4]

# The child: set the threads (`auto`: as a run does), then time `steps` steps of the nano model after 2 warm-up steps.
CHILD = """
import json, sys, time, torch
from gptlab.execution import threads
from gptlab.tools.benchmarks.train_step import Shape, build
mode, steps = sys.argv[1], int(sys.argv[2])
chosen = threads.apply(None if mode == "auto" else int(mode), 1)
step, _ = build(Shape(4, 4, 128, 256, 16), "gptlab", compile=False)
for _ in range(2):
    step()
start = time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({"threads": chosen.count, "seconds": (time.perf_counter() - start) / steps}))
"""


def measure(mode: str, steps: int) -> tuple[int, float]:
    """(threads used, wall seconds per step) of one child process."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "GPTLAB_CPU_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(steps)], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["threads"], result["seconds"]


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes that spin on a core until the block ends (each ended by its own handle)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0)  # running before the first child measures the load
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def condition(name: str, modes: list[str], rounds: int, steps: int) -> str:
    times: dict[str, list[float]] = {m: [] for m in modes}
    chose: list[int] = []
    load = os.getloadavg()[0]
    for _ in range(rounds):
        for mode in modes:
            used, seconds = measure(mode, steps)
            times[mode].append(seconds)
            if mode == "auto":
                chose.append(used)
    median = {m: statistics.median(t) for m, t in times.items()}
    best = min((m for m in modes if m != "auto"), key=median.__getitem__)
    cells = " | ".join(f"{median[m]:.3f}" for m in modes)
    return (f"| {name} (load {load:.1f}) | {cells} | {'/'.join(map(str, sorted(set(chose))))} | {best} | "
            f"{median['auto'] / median[best]:.2f} |")


def main(rounds: int, steps: int) -> None:
    cores = usable_cores()
    modes = [*map(str, range(1, cores + 1)), "auto"]
    print(f"{datetime.date.today()}, {cpu_name()}, {cores} usable cores; nano model (4 layers x 128, context 256, "
          f"micro-batch 16), {steps} steps per measurement after 2 warm-up steps, wall seconds per step, median of "
          f"{rounds} interleaved rounds; load = 1-minute load average at the start of each condition (the "
          f"machine is shared: it counts other users' work)\n")
    print(f"| condition | {' | '.join(f'{m} thread(s)' if m != 'auto' else 'auto' for m in modes)} | auto chose | "
          "best fixed | auto / best |")
    print(f"|---|{'---|' * len(modes)}---|---|---|")
    print(condition("as found", modes, rounds, steps), flush=True)
    with busy_loops(cores - 1):
        print(condition(f"{cores - 1} core(s) kept busy", modes, rounds, steps), flush=True)
