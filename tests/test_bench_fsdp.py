"""`scripts/bench_train.py --device cuda --parts fsdp` (gptlab.tools.benchmarks.fsdp_speed) on the CPU: the same code
that measures gpt3_xl's MFU, HFU and peak memory against the planner on a GPU runs a tiny FSDP model here, one row
per checkpointing mode asked for, with the estimate of the config the run resolved (no CUDA: no peak, no MFU)."""

from __future__ import annotations

import re

from helpers import ROOT, TINY_MODEL

from gptlab.tools.benchmarks.fsdp_speed import XL_FSDP, bench_fsdp

CPU_FSDP = [*TINY_MODEL, "trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.precision=32-true",
            "data.batch_size=4", *XL_FSDP[5:], "callbacks.progress_bar=null", "callbacks.throughput.peak_flops=1e8"]


def test_the_fsdp_rows_run_on_cpu(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # its temporary run dirs go under the working directory
    rows = bench_fsdp(ROOT, steps=4, overrides=CPU_FSDP, modes=("full",))
    assert len(rows) == 3, rows
    row = rows[2]
    assert row.startswith("| activation checkpointing full | "), row
    cells = [c.strip() for c in row.strip("|").split("|")]
    tokens_per_sec, mfu, hfu, peak, planned = cells[1:6]
    assert float(tokens_per_sec.replace(",", "")) > 0
    # peak_flops given: MFU from the model's FLOPs, HFU above it by full checkpointing's recomputation
    assert 0 < float(mfu.rstrip("%")) < float(hfu.rstrip("%"))
    assert peak == "- (no CUDA)" and re.fullmatch(r"\d+\.\d\d GiB", planned)
    assert not list(tmp_path.iterdir())  # the runs were temporary
