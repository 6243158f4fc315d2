"""scripts/bench_attention.py --device: the GPU table's code, run on CPU at a tiny size so it runs there first try."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from gptlab.model.sparse_attention import pattern_pairs
from gptlab.tools.benchmarks.attention_speed import Shape, kernel_rows

ROOT = Path(__file__).resolve().parents[1]


def test_every_kernel_row_is_exact_and_carries_its_flops_bound() -> None:
    shape = Shape(T=64, window=16, B=1, H=2, D=8, dtype=torch.float32)
    rows = {row.name: row for row in kernel_rows(shape, torch.device("cpu"), repeats=1, compile=False)}
    measured = [row for row in rows.values() if row.ms is not None]
    assert {"dense SDPA causal", "chunked local c=8 (CPU default)", "chunked local c=16", "chunked local pairs",
            "chunked strided"} <= {
        row.name for row in measured}
    assert all(row.diff is not None and row.diff < 1e-5 and not row.note for row in measured), measured
    assert rows["flex local"].ms is None and "no CPU backward" in rows["flex local"].note
    assert rows["flash-attn window"].ms is None and rows["flash-attn window"].note
    assert rows["chunked strided"].bound == pattern_pairs("dense", 64, 16) / pattern_pairs("strided", 64, 16)


def test_the_script_prints_kernel_and_model_rows(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--T", "64", "--window", "16", "--heads", "2", "--model-T", "32", "--model-layers",
            "2", "--model-width", "64", "--model-vocab", "97", "--repeats", "1", "--no-compile"]
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_attention.py"), *args], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for label in ("dense SDPA causal", "chunked local c=8 (CPU default)", "chunked local pairs", "chunked strided",
                  "all dense", "all local", "[dense, local]"):
        line = next(line for line in lines if line.startswith(label))
        assert "FAILED" not in line and "NOT EQUAL" not in line, line
    assert "FAILED" not in proc.stdout and "Traceback" not in proc.stderr
