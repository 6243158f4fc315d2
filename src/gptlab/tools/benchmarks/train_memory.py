"""Peak memory of a CPU training run against train's memory check (scripts/bench_train_memory.py, docs/benchmarks.md).

Each config runs `python src/train.py <overrides>` for a few steps in a fresh process tree, with check_memory=false so
that a run the check would refuse is measured too. Two numbers per run: each rank's peak RSS (the kernel's high-water
mark, VmHWM, read from /proc until the rank exits), and the machine's peak memory in use (the largest drop of
MemAvailable below its value before the launch, sampled every 50 ms), which counts the pages the ranks share (torch's
libraries) once. The check's estimate (gptlab.preflight.planning.estimate_memory) is printed beside them. Linux only.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import hydra
from hydra import compose, initialize_config_dir

from gptlab.config import ladder_steps  # noqa: F401  (registers ${gptlab.ladder_steps:r}, as train does)
from gptlab.config.suggest import compose_message
from gptlab.config.validate import check
from gptlab.errors import ConfigError
from gptlab.preflight.early_checks import build_model_config
from gptlab.preflight.guards import resolve_accelerator
from gptlab.preflight.planning import estimate_memory

ROOT = Path(__file__).resolve().parents[4]
GB = 1e9
STEPS = ("trainer.max_steps=3", "trainer.val_check_interval=2", "trainer.limit_val_batches=2", "check_memory=false",
         "callbacks.text_samples=null", "callbacks.zero_shot=null")


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def _ranks(root: int) -> dict[int, int]:
    """pid -> peak RSS bytes (VmHWM) of every train.py process under `root` (the ranks), root included."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    peaks = {}
    for pid in tree:
        try:
            if b"train.py" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peaks[pid] = int(line.split()[1]) * 1024
    return peaks


def measure(overrides: list[str], est: Any) -> dict[str, Any]:
    """Runs the config and returns its peaks, its estimate `est` and its exit code."""
    with tempfile.TemporaryDirectory(prefix="gptlab-train-memory-") as run_dir:
        before = mem_available()
        proc = subprocess.Popen([sys.executable, str(ROOT / "src" / "train.py"), *overrides, *STEPS,
                                 f"hydra.run.dir={run_dir}"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        peaks: dict[int, int] = {}
        used = 0
        while proc.poll() is None:
            for pid, peak in _ranks(proc.pid).items():
                peaks[pid] = max(peaks.get(pid, 0), peak)
            used = max(used, before - mem_available())
            time.sleep(0.05)
        err = proc.stderr.read() if proc.stderr else ""
    return {"overrides": overrides, "code": proc.returncode, "rank_peaks": sorted(peaks.values(), reverse=True),
            "machine_peak": used, "estimate_per_process": est.per_process, "estimate_total": est.total,
            "error": err.strip().splitlines()[-1] if proc.returncode and err.strip() else ""}


def estimate(overrides: list[str]) -> Any:
    """What train's memory check estimates for the same config (its own composition of train.yaml)."""
    try:
        with initialize_config_dir(str(ROOT / "conf"), version_base=None):
            cfg = compose("train", overrides=[*overrides, *STEPS, "paths.output_dir=/tmp"])
    except Exception as err:  # Hydra's compose errors, as train.py words them
        said = compose_message(err)
        if said is None:
            raise
        raise ConfigError(f"{' '.join(overrides)!r}: {said}") from err
    decided = check(cfg)
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model_cfg = build_model_config(cfg.model, tokenizer.vocab_size)
    return estimate_memory(model_cfg, cfg.data.batch_size, cfg.trainer,
                           resolve_accelerator(cfg.trainer.get("accelerator", "auto")), decided.runtime)


def row(result: dict[str, Any]) -> str:
    peaks = result["rank_peaks"]
    per_rank = max(peaks) if peaks else 0
    est = result["estimate_per_process"]
    ratio: Optional[float] = est / per_rank if per_rank else None
    return (f"| {' '.join(result['overrides'])} | {', '.join(f'{p / GB:.2f}' for p in peaks)} | "
            f"{result['machine_peak'] / GB:.2f} | {est / GB:.2f} | {result['estimate_total'] / GB:.2f} | "
            f"{'' if ratio is None else f'{ratio:.2f}'} | {result['code']} {result['error'][:80]} |")


def main(configs: list[list[str]]) -> None:
    estimates = [estimate(overrides) for overrides in configs]  # composed and checked before any is run
    print("| config | peak RSS per rank (GB) | machine peak in use (GB) | estimate per process (GB) | "
          "estimate total (GB) | estimate / largest rank | exit |")
    print("|---|---|---|---|---|---|---|")
    for overrides, est in zip(configs, estimates):
        print(row(measure(overrides, est)), flush=True)
