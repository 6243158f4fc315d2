"""scripts/doctor.py's CPU half: the environment rows, the attention kernels agreeing with the sdpa reference,
a real train step, and every GPU-only check listed as skipped with its reason."""

from __future__ import annotations

import pytest

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


def test_a_window_as_long_as_the_sequence_passes_and_a_wrong_kernel_still_fails(monkeypatch) -> None:
    """At w >= T a strided layer attends to the diagonal only: the true q and k gradients are 0 and every kernel's
    are rounding noise, which must not count as a disagreement (issue 54); a kernel that is really off still fails."""
    import torch

    from gptlab.tools import doctor

    report = Report()
    doctor.attention(report, torch.device("cpu"), T=64, window=64, repeats=1)
    assert not report.failed, report.table()
    assert "attention strided chunked T=64 w=64" in {row[0] for row in report.rows}

    right = doctor.attend

    def off_by_a_little(q, k, v, kind, window, impl):  # type: ignore[no-untyped-def]
        out = right(q, k, v, kind, window, impl)
        return out * (1 + 1e-3) if impl == "chunked" and kind == "strided" else out

    monkeypatch.setattr(doctor, "attend", off_by_a_little)
    wrong = Report()
    doctor.attention(wrong, torch.device("cpu"), T=64, window=64, repeats=1)
    failed = [row[0] for row in wrong.rows if row[1].startswith("FAIL")]
    assert failed == ["attention strided chunked T=64 w=64"], wrong.table()


def test_relative_error_judges_a_zero_reference_by_the_computations_scale() -> None:
    import torch

    from gptlab.tools.benchmarks.attention_speed import relative_error

    reference = [torch.full((4,), 4.0), torch.zeros(4)]
    assert relative_error([torch.full((4,), 4.0), torch.full((4,), 3e-6)], reference) < 1e-5  # noise on a zero
    assert relative_error([torch.full((4,), 4.0), torch.full((4,), 0.5)], reference) > 1.0  # a real error on a zero
    assert relative_error([torch.full((4,), 4.004), torch.zeros(4)], reference) == pytest.approx(1e-3, rel=1e-3)
