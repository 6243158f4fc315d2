"""Runs the parts (gptlab.tools.gpu_check.parts) one after another, each in its own process under its own time limit
and all within the run's budget; a part that fails, crashes or runs out of time stops nothing. Writes one markdown
section per part (machine, torch, date, status, tables) to <out>/gpu_check.md, every part's output to
<out>/gpu_check.log, and prints the report, then a short summary last. <out> is $OUT where set (the device tool's
folder that comes back), else outputs/gpu_check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gptlab.launch.arguments import ArgumentParser, number, writable_dir
from gptlab.tools.gpu_check.carry import RANKS, install_missing, prepare
from gptlab.tools.gpu_check.parts import PARTS, ROOT, Part

GPU_BUDGET_S = 540  # the 9 minutes, setup included: with the machine's start, inside 15 device minutes
TINY_BUDGET_S = 170  # under 3 minutes on an idle 2-core CPU
MIN_START_S = 3  # a part is not started with less than this left of the budget
# --tiny's budget and limits are sized for an idle 2-core Xeon (2.0 GHz) whose 1024^3 fp32 matmul runs at ~111
# GFLOP/s on 2 threads (issue 55). A slower or busier CPU gets them stretched by how much slower it measures, up to
# MAX_STRETCH; past that, the parts the budget cannot start are skipped, each saying so (not a failure).
REFERENCE_GFLOPS = 111.0
MAX_STRETCH = 6.0
FORKS = multiprocessing.get_context("forkserver")
PRELOAD = ["gptlab.tools.gpu_check.parts", "gptlab.tools.benchmarks.gpu_train", "gptlab.tools.benchmarks.fsdp_speed",
           "gptlab.tools.benchmarks.float8_speed", "gptlab.tools.benchmarks.attention_speed", "gptlab.tools.doctor"]


@dataclass
class Result:
    part: Part
    status: str  # ok | skipped | failed
    reason: str
    rows: list[str]
    seconds: float
    limit: float
    tiny: bool = False  # toy sizes on a CPU: its table is headed with what it ran at those sizes


def matmul_gflops(size: int = 1024, repeats: int = 5) -> float:
    """This CPU's fp32 matmul rate now (GFLOP/s, the median of `repeats`): what a loaded machine gives a part."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - started)
    return 2 * size**3 / sorted(times)[len(times) // 2] / 1e9


def stretch(gflops: float) -> float:
    """How much longer --tiny's limits are on a CPU measured at `gflops` than on the reference machine (1 or more,
    at most MAX_STRETCH)."""
    return min(MAX_STRETCH, max(1.0, REFERENCE_GFLOPS / max(gflops, 1e-9)))


def part_limit(part: Part, tiny: bool, budget: float, spent: float, scale: float = 1.0, speed: str = ""
               ) -> tuple[float, str, str]:
    """(seconds `part` may run, "", "") or (0, status, why it is not started) with `spent` of the run's `budget`
    seconds gone. --tiny's limits are `scale` times its parts' own; a part its budget cannot start is skipped there
    (the CPU was too slow for the budget: `speed` says how slow), and failed on a GPU (whose 9 minutes are sized to
    run everything)."""
    limit = min((part.tiny_limit_s * scale) if tiny else part.gpu_limit_s, budget - spent)
    if limit >= MIN_START_S:
        return limit, "", ""
    why = f"not started: the run's {budget:.0f} s budget was spent"
    return (0.0, "skipped", f"{why} ({speed})") if tiny else (0.0, "failed", why)


def machine(device: str) -> str:
    """"<device name>, torch <version>, <date>": the line every table carries."""
    import torch

    name = gpu_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    return f"{name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}"


def gpu_name() -> str:
    """nvidia-smi's name of GPU 0 where it answers: torch's would hold a CUDA context in this process all run long."""
    import torch

    name = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "--id=0"],
                              capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    return name or torch.cuda.get_device_name(0)


def child_env(site: str, tiny: bool) -> dict[str, str]:
    """The variables the parts run under (set in this process, which they inherit)."""
    paths = [p for p in (site, str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p]
    env = {"PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1",
           "GPTLAB_RANKS_DIR": os.environ.get("GPTLAB_RANKS_DIR", str(ROOT / RANKS.parent))}
    if tiny:
        env["TORCH_COMPILE_DISABLE"] = "1"  # the same code, without minutes of inductor on a CPU
    return env


def crash_reason(output: str, returncode: Optional[int]) -> str:
    """The exception's last line (`SomeError: message`) from a part's output, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", line)]
    return f"exited {returncode}: " + (errors or lines or ["no output"])[-1][:300]


def _forked_part(name: str, device: str, tiny: bool, result: str, output: str, fail: bool) -> None:
    """A part in a process forked from the forkserver, which imported torch, Lightning and gptlab once."""
    os.setsid()  # its own process group, killed as one when it runs out of time
    fd = os.open(output, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from gptlab.tools.gpu_check.parts import run_one

    run_one(name, device, tiny, Path(result), fail)


def start(part: Part, args: argparse.Namespace, result: Path, output: Path):  # type: ignore[no-untyped-def]
    """On a GPU each part is a fresh interpreter (nothing of another part's CUDA state); with --tiny a fork of a
    server that imported the heavy modules once (on a loaded 2-core CPU each import of Lightning takes seconds)."""
    fail = part.name in args.fail
    if args.tiny:
        ready = FORKS.Process(target=int)  # the first starts the forkserver, which imports PRELOAD: not the part's time
        ready.start()
        ready.join()
        process = FORKS.Process(target=_forked_part, args=(part.name, args.device, True, str(result), str(output),
                                                           fail))
        process.start()
        return process
    cmd = [sys.executable, "-m", "gptlab.tools.gpu_check.parts", part.name, "--device", args.device, "--result",
           str(result), *(["--fail"] if fail else [])]
    with output.open("w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait(process, limit: float) -> tuple[bool, Optional[int]]:  # type: ignore[no-untyped-def]
    """(timed out, exit code). A part past its limit is killed with its process group (its own subprocesses), and so
    is the part in flight when this runner is stopped (SIGTERM, Ctrl-C): none outlives the run."""
    popen = isinstance(process, subprocess.Popen)
    try:
        if popen:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return False, process.wait(timeout=limit)
        else:
            process.join(limit)
            if not process.is_alive():
                return False, process.exitcode
    finally:
        if (process.poll() if popen else process.exitcode) is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return True, process.wait() if popen else process.join()


def run_part(part: Part, args: argparse.Namespace, limit: float, log) -> Result:  # type: ignore[no-untyped-def]
    """One part under its limit; its rows, its status and reason, its output appended to the log."""
    ranks = Path(os.environ["GPTLAB_RANKS_DIR"]) / RANKS.name
    if part.needs_gpt2_ranks and not args.tiny and not ranks.is_file():
        return Result(part, "failed", f"{ranks} is missing: run `python scripts/fetch_gpt2_ranks.py` where the "
                      "network is reached (or `--prepare`) and carry data/cache/tiktoken", [], 0.0, limit, args.tiny)
    with tempfile.TemporaryDirectory() as tmp:
        result_file, output_file = Path(tmp) / "result.jsonl", Path(tmp) / "output.txt"
        output_file.touch()
        process = start(part, args, result_file, output_file)
        started = time.monotonic()
        timed_out, code = wait(process, limit)
        output = output_file.read_text(errors="replace")
        records = [json.loads(line) for line in result_file.read_text().splitlines()] if result_file.exists() else []
    log.write(f"\n===== {part.name} (exit {code}{', timed out' if timed_out else ''})\n{output}")
    rows = [row for record in records if "rows" in record for row in [*record["rows"], ""]]
    final = next((r for r in records if "status" in r), None)
    if timed_out:
        status, reason = "failed", f"timed out after {limit:.0f} s (its limit); rows measured before it are kept"
    elif final:
        status, reason = final["status"], final["reason"]
    else:
        status, reason = "failed", crash_reason(output, code)
    return Result(part, status, reason, rows, time.monotonic() - started, limit, args.tiny)


def section(result: Result, line: str) -> list[str]:
    status = "ok" if result.status == "ok" else f"{result.status}: {result.reason}"
    return [f"## {result.part.name}: {line}", "",
            f"`{result.part.described(result.tiny)}`: {status} ({result.seconds:.0f} s, limit {result.limit:.0f} s)",
            "", *result.rows]


def summary(results: list[Result], line: str, seconds: float, out: Path) -> list[str]:
    lines = [f"gpu_check: {line}; {seconds:.0f} s"]
    for r in results:
        lines.append(f"  {r.part.name:<12} {r.status:<8} {r.seconds:>4.0f} s of {r.limit:>3.0f} s"
                     + (f"  {r.reason[:160]}" if r.reason else ""))
    return [*lines, f"report: {out / 'gpu_check.md'}  log: {out / 'gpu_check.log'}"]


def write_report(out: Path, results: list[Result], line: str, took: str, setup: str,
                 argv: Optional[list[str]]) -> str:
    """gpu_check.md, rewritten after each part: a run stopped from outside still leaves the parts it finished."""
    head = [f"# gpu_check: {line}", "", f"`python scripts/gpu_check.py {' '.join(argv or sys.argv[1:])}`: {took}. "
            f"{setup}", ""]
    report = "\n".join(head + [row for r in results for row in section(r, line)])
    (out / "gpu_check.md").write_text(report + "\n")
    return report


def parse(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (with --device cpu: under 3 minutes)")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS), help="default: all, in order")
    parser.add_argument("--fail", nargs="+", choices=list(PARTS), default=[],
                        help="make these parts fail at their start (checks that a failing part stops nothing)")
    parser.add_argument("--budget", type=number(0.0).e_g("540"), default=None,
                        help="seconds for the whole run (default 540 on "
                        f"cuda, {TINY_BUDGET_S} with --tiny, stretched on a CPU slower than the reference); no part "
                        "runs past it")
    parser.add_argument("--out", type=writable_dir, default=None, help="where the report goes (default $OUT, else "
                        "outputs/gpu_check)")
    parser.add_argument("--prepare", action="store_true", help="here, with network: download the wheels the GPU "
                        "machine lacks into .whl/ and fetch the GPT-2 ranks, then exit")
    args = parser.parse_args(argv)
    if args.prepare:
        return args
    if args.device == "cpu" and not args.tiny:
        parser.refuse("--device cpu runs only at toy sizes: add --tiny (`python scripts/gpu_check.py --device cpu "
                      "--tiny`).")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.refuse(f"--device cuda: torch {torch.__version__} sees no CUDA device; on a CPU run `python "
                      "scripts/gpu_check.py --device cpu --tiny`.")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through wait(), which kills the part in flight
    if args.prepare:
        print("\n".join(prepare()) or "nothing to fetch: .whl/ and the GPT-2 ranks are there")
        return 0
    started = time.monotonic()
    gflops = matmul_gflops() if args.tiny else 0.0
    scale = stretch(gflops) if args.tiny else 1.0
    speed = (f"this CPU ran a 1024^3 fp32 matmul at {gflops:.0f} GFLOP/s, the reference {REFERENCE_GFLOPS:.0f}: "
             f"limits x{scale:.1f}" + (" (the most they stretch)" if scale >= MAX_STRETCH else ""))
    budget = args.budget if args.budget is not None else (TINY_BUDGET_S * scale if args.tiny else GPU_BUDGET_S)
    out = args.out or Path(os.environ.get("OUT") or ROOT / "outputs" / "gpu_check")
    out.mkdir(parents=True, exist_ok=True)
    site, setup = install_missing()
    os.environ.update(child_env(site, args.tiny))  # before the forkserver starts: it and every part inherit them
    sys.path[:0] = [site] if site else []
    FORKS.set_forkserver_preload(PRELOAD)
    line = machine(args.device)
    print(f"gpu_check: {line}\n{setup}" + (f"\n{speed}" if args.tiny else ""), flush=True)
    results = []
    with (out / "gpu_check.log").open("w") as log:
        for name in sorted(args.parts, key=lambda n: PARTS[n].tiny_limit_s) if args.tiny else args.parts:
            limit, status, why = part_limit(PARTS[name], args.tiny, budget, time.monotonic() - started, scale, speed)
            if status:
                results.append(Result(PARTS[name], status, why, [], 0.0, 0.0, args.tiny))
                continue
            results.append(run_part(PARTS[name], args, limit, log))
            log.flush()
            print(f"  {name}: {results[-1].status} ({results[-1].seconds:.0f} s)", flush=True)
            write_report(out, results, line, f"{time.monotonic() - started:.0f} s so far", setup, argv)
    seconds = time.monotonic() - started
    report = write_report(out, results, line, f"{seconds:.0f} s of a {budget:.0f} s budget", setup, argv)
    print("\n" + report + "\n\n" + "\n".join(summary(results, line, seconds, out)))
    return 1 if any(r.status == "failed" for r in results) else 0
