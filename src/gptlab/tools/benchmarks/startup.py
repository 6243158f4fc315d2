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
from pathlib import Path
from typing import Optional

from gptlab.tools.benchmarks.prepare import cpu_name

ROOT = Path(__file__).resolve().parents[4]
REFERENCE = "import torch"
TINY = ["model=nano", "trainer.accelerator=cpu", "trainer.limit_val_batches=2", "callbacks.text_samples=null",
        "~logger"]


def commands(out: Path) -> dict[str, list[str]]:
    """What is timed, by the name the table gives it. The first is the reference; the config commands must stay
    within 1.5x of it (issue 55); `import lightning.pytorch` is what any command that trains pays at least."""
    py, run_dir = sys.executable, f"hydra.run.dir={out / 'run'}"
    return {
        REFERENCE: [py, "-c", "import torch"],
        "import lightning.pytorch": [py, "-c", "import lightning.pytorch"],
        "train.py model.n_layerr=2 (config error)": [py, "src/train.py", "model.n_layerr=2"],
        "train.py --help": [py, "src/train.py", "--help"],
        "train.py --cfg job": [py, "src/train.py", "--cfg", "job"],
        "train.py trainer.devices=8 (refusal)": [py, "src/train.py", "trainer.devices=8", run_dir],
        "eval.py --cfg job": [py, "src/eval.py", "--cfg", "job", "ckpt_path=x.ckpt"],
        "sample.py --cfg job": [py, "src/sample.py", "--cfg", "job", "ckpt_path=x.ckpt"],
        "train.py nano, 1 step (launch to first step and out)": [
            py, "src/train.py", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1", run_dir + "1"],
        # its extra over the row above is what a sweep's second job costs besides its step
        "train.py -m nano seed=1,2, 1 step each (a 2-job sweep)": [
            py, "src/train.py", "-m", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1", "seed=1,2",
            f"hydra.sweep.dir={out / 'sweep'}"],
    }


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """User+sys CPU seconds of one run of `argv` (and of any children it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(repeats: int, only: Optional[list[str]] = None) -> dict[str, float]:
    """Print the table (markdown) and return each command's median CPU seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                       if p)}
    with tempfile.TemporaryDirectory(prefix="gptlab_bench_startup_") as tmp:
        chosen = {name: argv for name, argv in commands(Path(tmp)).items()
                  if name == REFERENCE or not only or any(o in name for o in only)}
        load_before = os.getloadavg()[0]
        times: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(repeats):
            for name, argv in chosen.items():
                times[name].append(cpu_seconds(argv, env))
        load_after = os.getloadavg()[0]
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{datetime.date.today()}, {cpu_name()}, {os.cpu_count()} logical cores; CPU seconds (user+sys), median of "
          f"{repeats} interleaved rounds; load average (1 min) {load_before:.1f} before, {load_after:.1f} after\n")
    print("| command | CPU s | x import torch |")
    print("|---|---|---|")
    for name, seconds in median.items():
        print(f"| `{name}` | {seconds:.2f} | {seconds / median[REFERENCE]:.2f} |")
    return median
