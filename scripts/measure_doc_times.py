"""Measure the commands the docs promise times for, record them, and put the minutes into the docs.

    python scripts/measure_doc_times.py                    # run every command (minutes each), record, rewrite the docs
    python scripts/measure_doc_times.py --keys train_default
    python scripts/measure_doc_times.py --write-only       # rewrite the docs from docs/measured_times.json
    python scripts/measure_doc_times.py --check            # exit 1 naming each promise the record does not back

Each command (gptlab.tools.doc_times.TIMED) runs as a user types it, in a fresh run dir outside the checkout, timed
from the launch of its interpreter to its exit. The record keeps the seconds with the machine (CPU model, cores,
torch's threads) and its load (the 1-minute load average sampled every 5 s while the command ran): a time measured
on a busy machine says so. tests/test_doc_times.py checks every promise in README.md, docs/ and conf/ against it.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gptlab.atomic import atomic_write_text
from gptlab.launch.arguments import ArgumentParser
from gptlab.launch.cli import user_errors_exit
from gptlab.tools.doc_times import RECORD, ROOT, TIMED, problems, read_record, rewrite, scanned_files


def machine() -> dict:
    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "unknown CPU")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cores": cores, "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def timed_run(key: str) -> dict:
    """Run TIMED[key] once; its wall seconds and the load while it ran."""
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    with tempfile.TemporaryDirectory(prefix=f"doc-times-{key}-") as out:
        command = [sys.executable if TIMED[key].command[0] == "python" else TIMED[key].command[0],
                   *TIMED[key].command[1:], f"hydra.run.dir={out}/run", f"hydra.sweep.dir={out}/sweep"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        before = os.getloadavg()[0]
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        seconds = time.perf_counter() - started
        done.set()
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(TIMED[key].command)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return {"command": " ".join(TIMED[key].command), "what": TIMED[key].what, "seconds": round(seconds, 1),
            "load_before": round(before, 2), "load_during": round(sum(loads) / len(loads), 2) if loads else None,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **machine()}


def write_docs(record: dict) -> list[Path]:
    changed = []
    for path in scanned_files():
        text = path.read_text()
        new = rewrite(text, record)
        if new != text:
            atomic_write_text(path, new)
            changed.append(path)
    return changed


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", nargs="+", choices=list(TIMED), default=list(TIMED), help="what to measure")
    parser.add_argument("--write-only", action="store_true", help="rewrite the docs from the record, measure nothing")
    parser.add_argument("--check", action="store_true", help="only check the docs against the record")
    args = parser.parse_args()
    record = read_record()
    if args.check:
        found = problems(record)
        print("\n".join(found) or f"every time promise matches {RECORD.relative_to(ROOT)}")
        raise SystemExit(1 if found else 0)
    if not args.write_only:
        for key in args.keys:
            print(f"{key}: {' '.join(TIMED[key].command)} ...", flush=True)
            measured = timed_run(key)
            print(f"  {measured['seconds']:.0f} s at load {measured['load_during']} "
                  f"({measured['cores']} cores, {measured['cpu']})", flush=True)
            record = read_record() | {key: measured}  # what another run of this script recorded meanwhile stays
            atomic_write_text(RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    for path in write_docs(record):
        print(f"rewrote {path.relative_to(ROOT)}")
    found = problems(record)
    if found:
        print("\n".join(found))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
