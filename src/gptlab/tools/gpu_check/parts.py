"""The parts of scripts/gpu_check.py, each the code of one benchmark or test command, at GPU sizes that fit the run's
9 minutes or, with `tiny`, at toy sizes on a CPU (the same functions, compile off, float8's half skipped).

Each part writes markdown rows through `emit` as it goes (what a part that runs out of time had measured is kept)
and returns None when it ran, or raises Skipped / Failed with the reason the report prints.
`python -m gptlab.tools.gpu_check.parts NAME --device cuda|cpu [--tiny] --result FILE` runs one part (the runner
starts each in its own process, under its own time limit).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[4]
CONF_DIR = ROOT / "conf"
TINY_MODEL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32"]
TINY_CPU = [*TINY_MODEL, "trainer.accelerator=cpu", "trainer.enable_model_summary=false", "callbacks.progress_bar=null",
            "callbacks.text_samples=null", "trainer.limit_val_batches=1"]
Emit = Callable[[list[str]], None]


class Skipped(Exception):
    """The part has nothing to measure here (its reason is printed as "skipped: <reason>")."""


class Failed(Exception):
    """The part ran and found a check that does not hold."""


@dataclass(frozen=True)
class Part:
    name: str
    what: str  # the command whose figures it gives
    gpu_limit_s: int
    tiny_limit_s: int
    run: Callable[[torch.device, bool, Emit], None]
    tiny_what: str = ""  # what it runs with --tiny on a CPU (the toy sizes), which heads its CPU table
    needs_gpt2_ranks: bool = False

    def described(self, tiny: bool) -> str:
        return self.tiny_what if tiny else self.what


def cell(text: str) -> str:
    """Text as one markdown table cell: its pipes escaped, its lines joined."""
    return " ".join(text.split("\n")).replace("|", "\\|")


def pytest_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """`pytest -m gpu` over the test files that hold gpu tests, but the doctor's (the doctor part runs its check)."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text())
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-n", "0", "-p", "no:cacheprovider", "-q", "-rfEs",
           "--deselect", "tests/test_gpu.py::test_doctor_runs_the_gpu_half", *files]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout[-20000:], done.stderr[-5000:], sep="\n", flush=True)
    counts, lines = pytest_outcome(done.stdout)
    emit([f"| `pytest -m gpu` ({len(files)} files) | passed | failed | errors | skipped | deselected |",
          "|---|---|---|---|---|---|",
          f"| {', '.join(Path(f).stem for f in files)} | " + " | ".join(
              str(counts.get(k, 0)) for k in ("passed", "failed", "error", "skipped", "deselected")) + " |",
          *(f"| {line} | | | | | |" for line in lines)])
    if counts.get("failed") or counts.get("error") or done.returncode not in (0, 5):
        raise Failed(f"pytest exited {done.returncode}: " + "; ".join(lines[:3] or done.stdout.splitlines()[-1:]))
    if not counts.get("passed"):
        reason = next((line.split(": ", 1)[-1] for line in lines if line.startswith("SKIPPED")), "none ran")
        raise Skipped(f"all {counts.get('skipped', 0)} gpu tests skipped: {reason}")


def pytest_outcome(stdout: str) -> tuple[dict[str, int], list[str]]:
    """({outcome: count} from pytest's last summary line, its FAILED/ERROR/SKIPPED lines from -rfEs)."""
    summary = next((line for line in reversed(stdout.splitlines()) if re.search(r"\d+ (passed|failed|skipped|"
                    r"deselected|errors?)\b", line)), "")
    counts = {("error" if k.startswith("error") else k): int(n)
              for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)\b", summary)}
    lines = [cell(line.strip()) for line in stdout.splitlines()
             if line.startswith(("FAILED ", "ERROR ", "SKIPPED "))]
    return counts, lines


def train_step_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """bench_train.py --device cuda --parts step: GPT-2 small's eager step against the reference, B=32."""
    from gptlab.tools.benchmarks.gpu_train import bench_gpu_steps

    tiny_model = dict(vocab_size=97, block_size=32, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
    emit(bench_gpu_steps(device, [2], 1, 1, False, model=tiny_model) if tiny
         else bench_gpu_steps(device, [32], steps=5, repeats=2, compiled=False))


def fit_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """bench_train.py --device cuda --parts fit: the Lightning fit against the plain loop, 0.5M-token steps."""
    from gptlab.tools.benchmarks.gpu_train import bench_fit

    if not tiny:
        return emit(bench_fit(CONF_DIR, device, 32, steps=12, val_every=4))
    overrides = [*TINY_CPU, "trainer.precision=32-true", "data.batch_size=4", "global_batch_tokens=256",
                 "trainer.max_steps=6", "trainer.val_check_interval=2"]
    emit(bench_fit(CONF_DIR, device, 4, 6, 2, overrides=overrides))


def typed_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """bench_train.py --device cuda --parts typed: `python src/train.py model=gpt2_small tokenizer=gpt2 trainer=gpu`."""
    from gptlab.tools.benchmarks.gpu_train import bench_typed

    rows = (bench_typed(ROOT, 4, typed=(*TINY_CPU, "callbacks.throughput.window_size=2", "trainer.log_every_n_steps=1"))
            if tiny else bench_typed(ROOT, 40))
    emit(rows)
    if len(rows) == 1:  # "typed run failed (rc): stderr"
        raise Failed(rows[0].splitlines()[0][:300])


def fsdp_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """bench_train.py --device cuda --parts fsdp, FSDP's default checkpointing (selective) only: gpt3_xl on one GPU."""
    from gptlab.tools.benchmarks.fsdp_speed import XL_FSDP, bench_fsdp

    if tiny:
        overrides = [*TINY_MODEL, "trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=1",
                     "trainer.precision=32-true", "data.batch_size=4", *XL_FSDP[5:], "callbacks.progress_bar=null",
                     "callbacks.throughput.peak_flops=1e8"]
        rows = bench_fsdp(ROOT, 4, overrides=overrides, modes=("selective",))
    else:
        rows = bench_fsdp(ROOT, 12, modes=("selective",))
    emit(rows)
    failed = [row for row in rows if "run failed" in row]
    if failed:
        raise Failed(failed[0][:300])


def float8_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """float8 against bf16: loss parity (the doctor's check) and a step's speed at GPT-3 XL's widths."""
    from gptlab.tools.benchmarks.float8_speed import float8_refusal, parity_rows, speed_rows

    parity = parity_rows(device, 20 if tiny else 300, tiny=tiny)
    emit(parity)
    emit(speed_rows(device, 2, 1, 1, tiny=True) if tiny else speed_rows(device, 4, steps=5, repeats=3))
    refusal = float8_refusal(device)
    if refusal:
        raise Skipped(refusal)
    if parity[-1].endswith("FAIL |"):
        raise Failed("float8's final loss is further from bf16's than the parity limit")


def attention_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """bench_attention.py --device cuda: every kernel against dense at T=8192, then GPT-3 Small's shape per pattern."""
    import torch

    from gptlab.tools.benchmarks.attention_speed import Shape, kernel_rows, model_rows

    dtype = torch.float32 if tiny else torch.bfloat16
    shape = Shape(T=64, window=16, B=1, H=2, D=8, dtype=dtype) if tiny else Shape(8192, 256, 1, 12, 64, dtype)
    repeats, compile = (1, False) if tiny else (10, True)
    rows = list(kernel_rows(shape, device, repeats, compile))
    emit(attention_table(rows, shape))
    lines = [f"| model, T={32 if tiny else 8192} w={shape.window} | ms/step | vs all dense | FLOPs bound |",
             "|---|---|---|---|"]
    model_rows(32 if tiny else 8192, shape.window, 1 if tiny else 2, device, repeats, compile,
               dict(n_layer=2, n_embd=64, n_head=1, vocab_size=97) if tiny else None,
               lambda label, ms, ratio, bound: lines.append(f"| {label} | {ms:.1f} | {ratio:.2f}x | {bound:.2f}x |"),
               lambda label, why: lines.append(f"| {label} | {why} | | |"))
    emit(lines)
    if any("FAILED" in line for line in lines):
        raise Failed("a model row raised: " + next(line for line in lines if "FAILED" in line)[:300])


def attention_table(rows: list, shape) -> list[str]:  # type: ignore[no-untyped-def]
    """The kernel rows as markdown: eager and compiled ms, ratio to dense, FLOPs bound, difference to the reference."""
    from gptlab.tools.benchmarks.attention_speed import EQUAL_RTOL

    dense = next(row for row in rows if row.kind == "dense")
    table = [f"| kernel, T={shape.T} w={shape.window} B={shape.B} H={shape.H}, fwd+bwd | eager ms | vs dense | "
             "compiled ms | vs dense | FLOPs bound | max diff / max ref |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.ms is None:
            table.append(f"| {row.name} | skipped: {cell(row.note)} | | | | | |")
            continue
        compiled = f"{row.compiled_ms:.3f} | {dense.compiled_ms / row.compiled_ms:.2f}x" if (
            row.compiled_ms and dense.compiled_ms) else "- | -"
        equal = "" if row.diff is not None and row.diff <= EQUAL_RTOL[shape.dtype] else " NOT EQUAL"
        table.append(f"| {row.name} | {row.ms:.3f} | {dense.ms / row.ms:.2f}x | {compiled} | {row.bound:.2f}x | "
                     f"{row.diff:.1e}{equal} |")
    return table


def doctor_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """scripts/doctor.py: the stack, the kernels' agreement, a real step, float8's parity."""
    from gptlab.tools.doctor import run

    report = run(device.type, 512 if tiny else None, 1 if tiny else 3, float8_steps=20 if tiny else 300)
    emit(["| check | result | detail |", "|---|---|---|",
          *(f"| {cell(check)} | {cell(result)} | {cell(detail)} |" for check, result, detail in report.rows),
          *(f"| {cell(check)} | skipped | {cell(why)} |" for check, why in report.skipped)])
    if report.failed:
        raise Failed("FAIL: " + ", ".join(check for check, result, _ in report.rows if result.startswith("FAIL")))


def fused_sweep_part(device: torch.device, tiny: bool, emit: Emit) -> None:
    """bench_fused.py --device cuda: k fused sweep members against the same k steps one after another, bf16 autocast
    as trainer=gpu trains: nano at k = 1, 4, 16 (micro-batch 32, nano's default), GPT-2 small at k = 1, 4 (B=8)."""
    from gptlab.tools.benchmarks.fused_shapes import GPT2_SMALL, NANO
    from gptlab.tools.benchmarks.fused_speed import measure, table

    if tiny:
        toy = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, vocab_size=97)
        return emit(["toy (L1 E32 T32), micro-batch 2, fp32", *table(measure([1, 2], 2, 1, device, toy))])
    if device.type != "cuda":
        raise Skipped("the fused sweep's GPU rows need a CUDA GPU (on a CPU: scripts/bench_fused.py)")
    emit(["nano (L4 H4 E128 T256), micro-batch 32, bf16 autocast (goal: >= 8x at k=16)",
          *table(measure([1, 4, 16], 32, 3, device, NANO, bf16=True))])
    emit(["gpt2_small (L12 H12 E768 T1024), micro-batch 8, bf16 autocast (goal: >= 1.3x at k=4)",
          *table(measure([1, 4], 8, 2, device, GPT2_SMALL, bf16=True))])


# GPU order: the figures that have waited longest first. With --tiny the cheapest run first (tiny_limit_s), so a
# loaded CPU that spends the run's budget loses the fewest parts. Tiny limits only stop a hung part; the budget
# (runner.TINY_BUDGET_S) keeps the run under 3 minutes on an idle 2-core CPU (both stretch on a slower one).
# GPU limits: sized from the earlier measurements in docs/benchmarks.md to sum to the 9 minutes; none measured as a
# whole yet.
PARTS = {p.name: p for p in [
    Part("fused_sweep", "bench_fused.py --device cuda: nano k=1,4,16 B=32; gpt2_small k=1,4 B=8; bf16", 40, 30,
         fused_sweep_part, "bench_fused's members at toy sizes: L1 H2 E32 T32 V97, k=1,2, micro-batch 2, fp32"),
    Part("fit", "bench_train.py --device cuda --parts fit --batches 32 --fit-steps 12 --fit-val-every 4", 90, 90,
         fit_part, "the Lightning fit against the plain loop at toy sizes: L1 H2 E32 T32, micro-batch 4, 6 steps "
         "of 256 tokens, validation every 2, fp32", needs_gpt2_ranks=True),
    Part("fsdp", "bench_train.py --device cuda --parts fsdp --fsdp-steps 12, selective checkpointing only", 75, 120,
         fsdp_part, "trainer=fsdp on one CPU device at toy sizes: L1 H2 E32 T32, micro-batch 4, 4 steps, selective "
         "checkpointing"),
    Part("float8", "runtime.float8 against bf16: loss parity (300 steps), step speed", 50, 60, float8_part,
         "runtime.float8 against bf16 at toy sizes: parity over 20 steps, one toy step (float8 itself needs a GPU)"),
    Part("pytest", "pytest -m gpu", 85, 90, pytest_part, "pytest -m gpu (every test skips without a GPU)"),
    Part("train_step", "bench_train.py --device cuda --parts step --batches 32 --steps 5 --repeats 2", 40, 60,
         train_step_part, "the eager step against the reference at toy sizes: L1 H2 E32 T32 V97, B=2, 1 step"),
    Part("typed", "bench_train.py --device cuda --parts typed --typed-steps 40", 45, 120, typed_part,
         "python src/train.py at toy sizes on the CPU: L1 H2 E32 T32, 4 steps", needs_gpt2_ranks=True),
    Part("attention", "bench_attention.py --device cuda --repeats 10", 50, 60, attention_part,
         "every attention kernel at toy sizes: T=64 w=16 B=1 H=2 D=8 fp32, eager, 1 repeat; a 2-layer E64 model"),
    Part("doctor", "scripts/doctor.py", 50, 60, doctor_part,
         "scripts/doctor.py --device cpu at toy sizes: attention at T=512, 1 repeat, float8 parity over 20 steps"),
]}


def run_one(name: str, device: str, tiny: bool, result: Path, fail: bool = False) -> None:
    """Runs part `name`, appending to `result` one JSON line per emit ({"rows"}) and a last one ({"status", "reason"});
    an exception ends it without that last line (the runner reads the reason from its output)."""
    import torch

    def write(record: dict) -> None:
        with result.open("a") as f:
            f.write(json.dumps(record) + "\n")

    if fail:
        raise RuntimeError(f"failure injected by --fail {name}")
    try:
        PARTS[name].run(torch.device(device), tiny, lambda rows: write({"rows": rows}))
    except Skipped as why:
        return write({"status": "skipped", "reason": str(why)})
    except Failed as why:
        return write({"status": "failed", "reason": str(why)})
    write({"status": "ok", "reason": ""})


def main() -> None:
    parser = argparse.ArgumentParser(description="Run one part of scripts/gpu_check.py (its runner starts this).")
    parser.add_argument("name", choices=list(PARTS))
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--result", type=Path, required=True, help="JSON lines: {rows} as they come, then {status}")
    parser.add_argument("--fail", action="store_true", help="fail at once (tests that a failing part stops nothing)")
    args = parser.parse_args()
    run_one(args.name, args.device, args.tiny, args.result, args.fail)


if __name__ == "__main__":
    main()
