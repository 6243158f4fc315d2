"""scripts/doctor.py's CPU half: the environment rows, the attention kernels agreeing with the sdpa reference,
a real train step, and every GPU-only check listed as skipped with its reason."""

from __future__ import annotations

from gptlab.tools.doctor import Report, run


def test_cpu_half_checks_kernels_and_a_step_and_names_what_it_skipped() -> None:
    report = run(device="cpu", attention_T=512, repeats=1)
    assert not report.failed, report.table()
    checks = {row[0]: row for row in report.rows}
    for kind in ("local", "strided"):
        for impl in ("sdpa", "chunked"):
            assert f"attention {kind} {impl} T=512 w=256" in checks
    step = next(row for row in report.rows if row[0].startswith("train step"))
    assert step[1].endswith("tok/s") and "loss" in step[2]
    skipped = dict(report.skipped)
    assert {"bf16", "attention flex", "attention flash", "compiled train step", "2-rank NCCL DDP step",
            "float8 loss parity (300 steps)"} <= set(skipped)
    assert all(why for why in skipped.values())
    text = report.table()
    assert "skipped:" in text and "FlexAttention has no CPU backward" in text


def test_a_disagreeing_kernel_fails_the_report() -> None:
    report = Report()
    report.add("attention local chunked", "1.0 ms", "max|diff|/max|ref| 1e-1", ok=False)
    assert report.failed and "FAIL" in report.table()
