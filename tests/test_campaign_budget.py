"""A run bounded by a budget, one key: `budget=tokens:N` or `flops:N` sets the steps (a wider variant gets fewer at
one FLOPs budget), `budget=seconds:N` trains for N seconds of training steps with the lr schedule laid over them and
ends as a run that reached its last step does (gptlab.config.budget, train/callbacks/time_budget.py). The seconds
come from a fake clock that advances one second a call, so no test here depends on the machine's speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import TINY, compose_config, compose_tiny, run_train, scalars

from gptlab.config import budget
from gptlab.config.validate import check
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.model.accounting import training_flops_per_token
from gptlab.train.optim import warmup_cosine_factor


def steps(*overrides: str) -> int:
    cfg = compose_config([*TINY, *overrides])
    budget.apply(cfg)
    return int(cfg.trainer.max_steps)


def test_a_tokens_budget_and_a_flops_budget_set_the_steps() -> None:
    per_step = 4 * 32  # TINY's data.batch_size x model.block_size
    assert steps("budget=tokens:12800") == 12800 // per_step
    assert steps("budget=tokens:12801") == 12800 // per_step + 1  # a partial step is trained: at least the budget
    assert steps("budget=tokens:12800", "trainer.max_steps=7") == 12800 // per_step  # the budget wins, banner says
    narrow = steps("budget=flops:1e9")
    wide = steps("budget=flops:1e9", "model.n_embd=64")
    cfg = compose_config([*TINY, "model.n_embd=64"])
    model = GPTConfig.for_tokenizer(dict(cfg.model), 256)
    assert wide == math.ceil(1e9 / (per_step * training_flops_per_token(model)["total"])) and wide < narrow
    assert steps("budget=tokens:12800", "global_batch_tokens=256") == 50  # tokens per step: the global batch


@pytest.mark.parametrize("value", ["minutes:5", "seconds", "seconds:-3", "tokens:0", "flops:lots", "tokens:inf"])
def test_a_malformed_budget_is_one_line_with_the_three_forms(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^budget=.* is invalid: use KIND:AMOUNT with KIND one of tokens, flops, "
                                          r"seconds .*budget=seconds:300"):
        check(compose_config([*TINY, f"budget={value}"]))


def test_a_malformed_budget_is_refused_before_the_run_dir_is_made(tmp_path: Path) -> None:
    done = run_train([f"hydra.run.dir={tmp_path / 'run'}", *TINY, "budget=hours:1"], check=False)
    assert done.returncode == 2 and "budget='hours:1' is invalid" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override", ["stages.seq_lens=[16,32]", "model.untie_at=0.5"])
def test_a_seconds_budget_refuses_schedules_planned_over_steps(override: str, tmp_path: Path) -> None:
    cfg = compose_tiny(tmp_path, "budget=seconds:60", override)
    with pytest.raises(ConfigError, match=r"budget=seconds:60 lays the lr schedule over seconds, but "
                                          r"(stages.seq_lens|model.untie_at) .*budget=tokens:2e6"):
        check(cfg)


class FakeClock:
    """One second a call. A step reads it twice (the budget before the optimizer step, TrainingClock at its end),
    so every step takes two of its seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _timed_run(run_dir: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str) -> dict:
    from gptlab.apps.train import train
    from gptlab.train.callbacks import training_clock

    monkeypatch.setattr(training_clock, "clock", FakeClock())
    train(compose_tiny(run_dir, "trainer.val_check_interval=1000", "callbacks.text_samples=null", *overrides))
    return json.loads((run_dir / "run_summary.json").read_text())


def test_a_seconds_budget_ends_the_run_at_its_seconds_with_the_lr_schedule_over_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    summary = _timed_run(run, monkeypatch, "budget=seconds:24", "scheduler.warmup_steps=3", "trainer.max_steps=5")
    # 12 steps of two seconds, though trainer.max_steps said 5: the budget is the one bound
    assert summary["global_step"] == 12 and summary["train_seconds"] == 24.0
    assert summary["final_val_loss"] is not None  # ended as at max_steps: validated at its last step
    assert (run / "checkpoints" / "last.ckpt").is_file()
    lr = scalars(run)["train/lr"]  # at step s: the lr step s trained with, decided when step s - 1 ended
    peak, planned = max(lr.values()), budget.SECONDS_STEP_CEILING
    for step, value in lr.items():
        if step <= 4:  # the warmup, in steps (factor 1/3, 2/3, 1), then the peak
            expected = warmup_cosine_factor(step - 1, planned, 3, 0.1)
        else:  # the cosine over the 19 seconds left after the warmup's last backward (second 5)
            share = (2 * (step - 1) - 1 - 5) / 19  # spent through step s - 1's backward
            expected = warmup_cosine_factor(3 + (planned - 3) * share, planned, 3, 0.1)
        assert value == pytest.approx(peak * expected, rel=1e-5), step
    after = [lr[s] for s in range(4, 13)]
    assert all(a > b for a, b in zip(after, after[1:])) and lr[12] < 0.2 * peak  # toward its end lr, 0.1 x peak


def test_a_continued_seconds_budget_trains_only_the_seconds_left(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "first"
    _timed_run(first, monkeypatch, "budget=seconds:12")
    ckpt = first / "checkpoints" / "last.ckpt"
    again = _timed_run(tmp_path / "again", monkeypatch, "budget=seconds:20", f"ckpt_path={ckpt}")
    assert again["global_step"] == 10 and again["train_seconds"] == 20.0  # 6 steps before, 4 now


def test_resume_auto_leaves_a_run_that_spent_its_seconds_as_it_is(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gptlab.checkpoint.reader import checkpoints_newest_first
    from gptlab.runs.resume import finished_run

    run = tmp_path / "run"
    _timed_run(run, monkeypatch, "budget=seconds:8")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    _timed_run(run, monkeypatch, "budget=seconds:8", "resume=auto")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    cfg = compose_tiny(run, "budget=seconds:8", "resume=auto")
    budget.apply(cfg)
    done = finished_run(cfg, run, str(checkpoints_newest_first(run)[0]), "auto", budget.of(cfg))
    assert done is not None and done.step == 4
    assert "at step 4, the end of budget=seconds:8" in done.message(run) and "budget=seconds:16" in done.message(run)
    # with seconds left, the same run is not finished: resume=auto trains them
    longer = compose_tiny(run, "budget=seconds:12", "resume=auto")
    budget.apply(longer)
    assert finished_run(longer, run, str(checkpoints_newest_first(run)[0]), "auto", budget.of(longer)) is None
