"""Sweeps: a real DDP multirun keeps every rank in its job's dir, the report reads it, launchers run."""

from __future__ import annotations

from pathlib import Path

from helpers import TINY_RUN, compose_config, run_train

from gptlab.config.schemas import Runtime
from gptlab.report.runs import write_report
from gptlab.runs.run_dir import event_files

SWEEP = TINY_RUN + ["trainer.max_steps=6", "trainer.val_check_interval=3", "trainer.log_every_n_steps=1"]
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


def _only_child(path: Path) -> Path:
    children = list(path.iterdir())
    assert len(children) == 1, children
    return children[0]


def _assert_job_dir_of_two_ranks(job: Path) -> None:
    assert (job / "train_rank1.log").exists()  # rank 1 ran inside this job's dir
    assert len(event_files(job)) == 1  # one log per job
    assert "Model weights identical on all 2 ranks" in (job / "train.log").read_text()
    assert (job / "checkpoints" / "last.ckpt").exists()


def test_ddp_multirun_keeps_ranks_in_their_job_dirs_and_reports(tmp_path: Path) -> None:
    proc = run_train(["-m", *SWEEP, *DDP, "model.norm=pre,post"], cwd=tmp_path, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    outputs = tmp_path / "outputs"
    assert [p.name for p in outputs.iterdir()] == ["multiruns"]  # no stray run dirs from child ranks
    sweep = _only_child(_only_child(_only_child(outputs / "multiruns")))  # <name>/<date>/<time>: one sweep
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for job in ("0", "1"):
        _assert_job_dir_of_two_ranks(sweep / job)

    table, plot = write_report(sweep)
    text = table.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| 0 ") or line.startswith("| 1 ")]
    assert len(rows) == 2 and "model.norm" in text
    assert "| pre |" in rows[0] and "| post |" in rows[1]
    assert plot.stat().st_size > 5000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_single_ddp_run_writes_one_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_train([*SWEEP, *DDP, f"hydra.run.dir={run_dir}"], cwd=tmp_path, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    _assert_job_dir_of_two_ranks(run_dir)


def test_submitit_local_launcher_runs_a_two_job_sweep(tmp_path: Path) -> None:
    args = ["-m", *SWEEP, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
            "model.pos_emb=learned,none"]
    proc = run_train(args, cwd=tmp_path, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    sweep = _only_child(_only_child(_only_child(tmp_path / "outputs" / "multiruns")))
    assert (sweep / ".submitit").is_dir()  # the jobs really went through submitit
    for job, value in (("0", "learned"), ("1", "none")):
        assert (sweep / job / "run_summary.json").exists()
        # Named in the submitit worker by the swept override alone (the fixed ones excluded in the launching process).
        assert [p.parent.name for p in event_files(sweep / job)] == [f"model.pos_emb={value}"]


def test_optuna_search_under_ddp_trains_each_trial_on_every_rank(tmp_path: Path) -> None:
    """Each trial's sampled lr and warmup reach rank 1 through the job's own overrides: ranks that trained
    with different values would end with different weights, which the rank check turns into a failure."""
    args = ["hparams_search=lr_optuna", "hydra.sweeper.n_trials=2", *SWEEP, *DDP]
    proc = run_train(args, cwd=tmp_path, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    sweep = _only_child(_only_child(_only_child(tmp_path / "outputs" / "multiruns")))
    result = (sweep / "optimization_results.yaml").read_text()
    assert "optimizer.lr" in result and "best_value" in result
    lrs = set()
    for job in ("0", "1"):
        _assert_job_dir_of_two_ranks(sweep / job)
        overrides = (sweep / job / ".hydra" / "overrides.yaml").read_text().split()
        lrs |= {o for o in overrides if o.startswith("optimizer.lr=")}
        (events,) = event_files(sweep / job)
        assert events.parent.name.startswith("optimizer.lr=") and "hparams_search" not in events.parent.name
    assert len(lrs) == 2  # two trials, two sampled learning rates


def test_fsdp_trainer_composes_into_fsdp2(tmp_path: Path) -> None:
    """trainer=fsdp composes into Lightning's ModelParallelStrategy with gptlab's per-Block plan; it runs on CPU
    (tests/test_fsdp.py trains with it)."""
    import hydra
    from lightning.pytorch.strategies import ModelParallelStrategy

    cfg = compose_config(["trainer=fsdp"], tmp_path)
    assert cfg.trainer.precision == "bf16-mixed" and cfg.trainer.strategy.reshard_after_forward is True
    strategy = hydra.utils.instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, ModelParallelStrategy)
    assert Runtime(**cfg.runtime).checkpointing(sharded=True) == "selective"  # FSDP's default
