"""The CPU time each entry point spends before it does anything, against `python -c "import torch"` measured in the
same run: every command is a fresh interpreter, rounds interleave the commands (a load that changes hits all of
them alike), and a command's time is the user+sys CPU of its child process (resource.RUSAGE_CHILDREN), the median
of the rounds. CPU time, not wall time: on a shared machine the wall clock measures the other users."""

from __future__ import annotations

import datetime
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gptlab.tools.benchmarks.prepare import cpu_name

ROOT = Path(__file__).resolve().parents[4]
REFERENCE = "import torch"
TINY = ["model=nano", "trainer.accelerator=cpu", "trainer.limit_val_batches=2", "callbacks.text_samples=null",
        "~logger"]


@dataclass(frozen=True)
class Command:
    """A timed command and what it must do to be the row its name says: its exit code and a text of its output (a
    run that was refused, or skipped as finished, would be timed as a run otherwise)."""

    argv: list[str]
    code: int = 0
    says: Optional[str] = None
    after: Optional[str] = None  # a row that must run before it in the same round (it works on that row's output)


HYDRA_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
ONE_STEP = "train.py nano, 1 step (launch to first step and out)"
FINISHED = "train.py resume=auto on that finished run (nothing to do)"


def commands(out: Path) -> dict[str, Command]:
    """What is timed in one round (`out`: that round's own dir), by the name the table gives it. The first is the
    reference; the config commands must stay within 1.5x of it (issue 55); `import lightning.pytorch` is what any
    command that trains pays at least."""
    py, run_dir, one_step = sys.executable, f"hydra.run.dir={out / 'run'}", f"hydra.run.dir={out / 'run1'}"
    step = [*TINY, "trainer.max_steps=1", "trainer.val_check_interval=1"]
    return {
        REFERENCE: Command([py, "-c", "import torch"]),
        "import lightning.pytorch": Command([py, "-c", "import lightning.pytorch"]),
        "train.py model.n_layerr=2 (config error)": Command([py, "src/train.py", "model.n_layerr=2"], 2,
                                                            "model.n_layerr is not a key"),
        "train.py --help": Command([py, "src/train.py", "--help"]),
        "train.py --cfg job": Command([py, "src/train.py", "--cfg", "job"]),
        "train.py trainer.devices=8 (refusal)": Command([py, "src/train.py", "trainer.devices=8", run_dir], 2,
                                                        "asks for 8 GPUs"),
        "eval.py --cfg job": Command([py, "src/eval.py", "--cfg", "job", "ckpt_path=x.ckpt"]),
        "sample.py --cfg job": Command([py, "src/sample.py", "--cfg", "job", "ckpt_path=x.ckpt"]),
        "campaign.py --help": Command([py, "scripts/campaign.py", "--help"]),
        ONE_STEP: Command([py, "src/train.py", *step, one_step], says="Best val/loss"),
        FINISHED: Command([py, "src/train.py", *step, one_step, "resume=auto"], says="is finished", after=ONE_STEP),
        # its extra over the 1-step row is what a sweep's second job costs besides its step
        "train.py -m nano seed=1,2, 1 step each (a 2-job sweep)": Command(
            [py, "src/train.py", "-m", *step, "seed=1,2", f"hydra.sweep.dir={out / 'sweep'}"], says="Best val/loss"),
        # the same under Hydra's own basic sweeper, which composes each job twice (gptlab/launch/compose_once.py)
        "the 2-job sweep, each job composed twice (Hydra's basic sweeper)": Command(
            [py, "src/train.py", "-m", *step, "seed=1,2", f"hydra.sweep.dir={out / 'sweep_hydra'}",
             f"hydra.sweeper._target_={HYDRA_SWEEPER}"], says="Best val/loss"),
    }


def cpu_seconds(name: str, command: Command, env: dict[str, str]) -> float:
    """User+sys CPU seconds of one run of the command (and of any children it waited for); raises if it did not do
    what its row names."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command.argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    said = done.stdout + done.stderr
    if done.returncode != command.code or (command.says is not None and command.says not in said):
        raise RuntimeError(f"{name!r} exited {done.returncode} (the row needs {command.code}"
                           f"{f' and {command.says!r} in its output' if command.says else ''}):\n{said[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(repeats: int, only: Optional[list[str]] = None) -> dict[str, float]:
    """Print the table (markdown) and return each command's median CPU seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                       if p)}
    with tempfile.TemporaryDirectory(prefix="gptlab_bench_startup_") as tmp:
        rows = commands(Path(tmp))
        chosen = {name for name in rows if name == REFERENCE or not only or any(o in name for o in only)}
        chosen |= {rows[name].after for name in chosen if rows[name].after}
        load_before = os.getloadavg()[0]
        times: dict[str, list[float]] = {name: [] for name in rows if name in chosen}
        for round_number in range(repeats):
            for name, command in commands(Path(tmp) / f"round{round_number}").items():
                if name in chosen:
                    times[name].append(cpu_seconds(name, command, env))
        load_after = os.getloadavg()[0]
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{datetime.date.today()}, {cpu_name()}, {os.cpu_count()} logical cores; CPU seconds (user+sys), median of "
          f"{repeats} interleaved rounds; load average (1 min) {load_before:.1f} before, {load_after:.1f} after\n")
    print("| command | CPU s | x import torch |")
    print("|---|---|---|")
    for name, seconds in median.items():
        print(f"| `{name}` | {seconds:.2f} | {seconds / median[REFERENCE]:.2f} |")
    return median
