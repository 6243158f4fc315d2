"""resume=restart deletes only the run's own files (issue 46): a dir that holds a sweep or another run's dir is refused
whatever `resume` says, before anything in it is searched, continued or deleted, and no refusal suggests a command
that would delete more. The issue's cases: hydra.run.dir=<a sweep dir> resume=restart deleted all its jobs'
checkpoints; hydra.run.dir=. in a checkout that had trained deleted those under outputs/runs/."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from helpers import TINY_RUN, compose_config, run_train

from gptlab.errors import ConfigError
from gptlab.runs.one_run import check_one_run, other_run
from gptlab.runs.resume import continuation, start_over

RUN = [*TINY_RUN, "trainer.max_steps=2", "trainer.val_check_interval=2", "data.store=memory"]


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def job(root: Path, name: str) -> Path:
    """What a trained run leaves in its dir (the files that tell one apart; the checkpoints are stand-ins)."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- model.norm=pre\n")
    (run / "config_resolved.yaml").write_text("seed: 0\n")
    (run / "checkpoints").mkdir()
    for ckpt in ("last.ckpt", "step=2.ckpt"):
        (run / "checkpoints" / ckpt).write_bytes(f"{name}/{ckpt}".encode())
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"events")
    (run / "run_summary.json").write_text("{}")
    return run


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    sweep = tmp_path / "sweep"
    for n in range(3):
        job(sweep, str(n))
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (sweep / "sweep_config.json").write_text("{}")
    return sweep


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A launch dir that trained once: its run lies under outputs/runs/."""
    launch = tmp_path / "checkout"
    job(launch / "outputs" / "runs" / "train" / "2026-11-28", "10-00-00")
    (launch / "README.md").write_text("a checkout\n")
    return launch


def test_restart_into_a_sweep_dir_is_refused_and_deletes_nothing(sweep_dir: Path) -> None:
    """The issue's reproduction, through the entry point."""
    before = tree(sweep_dir)
    proc = run_train([*RUN, f"hydra.run.dir={sweep_dir}", "resume=restart"], cwd=sweep_dir.parent)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip()
    assert err.startswith(f"gptlab: error: hydra.run.dir='{sweep_dir}' holds other runs") and "\n" not in err, err
    assert "it is a sweep dir (sweep_config.json)" in err and "launch the same sweep again" in err
    assert tree(sweep_dir) == before


@pytest.mark.parametrize("resume", ["null", "auto", "restart"])
def test_the_launch_dir_of_earlier_runs_is_refused(checkout: Path, resume: str) -> None:
    """hydra.run.dir=. in a checkout: refused for every `resume`; its runs under outputs/ are left as they were."""
    before = tree(checkout)
    cfg = compose_config([*RUN, f"resume={resume}"], checkout)
    with pytest.raises(ConfigError, match="holds other runs") as err:
        continuation(cfg, checkout, None, None, fsdp=False)
    nested = checkout / "outputs" / "runs" / "train" / "2026-11-28" / "10-00-00"
    assert f"hydra.run.dir={str(nested)!r} resume=auto" in str(err.value)
    with pytest.raises(ConfigError, match="holds other runs"):
        start_over("restart", checkout)
    assert tree(checkout) == before


def test_no_refusal_suggests_restart_where_others_runs_lie(sweep_dir: Path, checkout: Path) -> None:
    """The ways out work as written: a new hydra.run.dir, or the other run's own dir with resume=auto (which deletes
    nothing); never resume=restart."""
    for where in (sweep_dir, checkout):
        with pytest.raises(ConfigError) as err:
            check_one_run(where, f"hydra.run.dir={str(where)!r}")
        message = str(err.value)
        assert "pass resume=restart" not in message and "give a new hydra.run.dir" in message, message
    nested = other_run(checkout).parent
    assert other_run(nested) is None  # the suggested dir holds one run: resume=auto is not refused for others
    assert other_run(sweep_dir / "0") is None  # a sweep job's own dir, as a relaunched sweep continues it


def test_restart_in_a_run_dir_of_its_own_deletes_only_its_records(tmp_path: Path) -> None:
    """A single run's dir: its checkpoints, events and summary go; its config and anything else stay."""
    run = job(tmp_path, "run")
    (run / "notes.txt").write_text("mine\n")
    removed = start_over("restart", run)
    assert sorted(str(p.relative_to(run)) for p in removed) == [
        "checkpoints/last.ckpt", "checkpoints/step=2.ckpt", "run_summary.json",
        "tensorboard/events.out.tfevents.1.host"]
    assert (run / "notes.txt").exists() and (run / "config_resolved.yaml").exists() and (run / ".hydra").is_dir()


def test_a_run_dir_beside_other_runs_is_its_own(tmp_path: Path) -> None:
    """Runs side by side (outputs/runs/<name>/<date>/<time>/) do not hold each other."""
    first, second = job(tmp_path, "10-00-00"), job(tmp_path, "11-00-00")
    assert other_run(first) is None and other_run(second) is None


def test_a_users_ckpt_elsewhere_in_the_run_dir_is_not_the_runs(tmp_path: Path) -> None:
    """A .ckpt a user keeps in a run dir outside checkpoints/ (mydata/pretrained.ckpt, newer than the run's) is not
    the run's: resume=restart deleted it, and resume=auto or ckpt_path=<run dir> picked it as the newest."""
    import os

    from gptlab.checkpoint.reader import checkpoints_newest_first

    run = job(tmp_path, "run")
    (run / "mydata").mkdir()
    mine = run / "mydata" / "pretrained.ckpt"
    mine.write_bytes(b"the user's own")
    os.utime(mine, (4e9, 4e9))  # newer than the run's checkpoints
    assert sorted(p.name for p in checkpoints_newest_first(run)) == ["last.ckpt", "step=2.ckpt"]
    assert sorted(p.name for p in checkpoints_newest_first(run / "checkpoints")) == ["last.ckpt", "step=2.ckpt"]
    removed = start_over("restart", run)
    assert mine.read_bytes() == b"the user's own" and mine not in removed
    user_dir = tmp_path / "mine"  # no run, only a user's file below: not "already holds a run"
    (user_dir / "models").mkdir(parents=True)
    (user_dir / "models" / "a.ckpt").write_bytes(b"x")
    assert continuation(compose_config(RUN, tmp_path), user_dir, None, None, fsdp=False).ckpt_path is None


@pytest.mark.parametrize("resume", ["null", "auto", "restart"])
def test_a_run_dir_inside_a_runs_checkpoints_dir_is_refused(tmp_path: Path, resume: str) -> None:
    """hydra.run.dir=<run>/checkpoints: resume=auto continued that run's last.ckpt as a new run nested in it,
    resume=restart deleted its checkpoints, and resume=null's refusal offered resume=restart. Refused for every
    resume, naming the run's own dir; a plain dir of the user's .ckpt files starts a new run and keeps them."""
    run = job(tmp_path, "run")
    before = tree(run)
    cfg = compose_config([*RUN, f"resume={resume}"], tmp_path)
    for inside in (run / "checkpoints", run / "checkpoints" / "sub"):
        with pytest.raises(ConfigError, match="lies in the checkpoints/ dir of the run in") as err:
            continuation(cfg, inside, None, None, fsdp=False)
        said = str(err.value)
        assert f"hydra.run.dir={str(run)!r} resume=auto" in said and "pass resume=restart" not in said
    with pytest.raises(ConfigError, match="lies in the checkpoints/ dir"):
        start_over("restart", run / "checkpoints")
    assert tree(run) == before
    plain = tmp_path / "models"
    plain.mkdir()
    (plain / "a.ckpt").write_bytes(b"the user's own")
    assert continuation(cfg, plain, None, None, fsdp=False).ckpt_path is None
    assert start_over(resume, plain) == [] and (plain / "a.ckpt").exists()


def test_resume_auto_into_another_model_names_a_way_out_that_is_typed(tmp_path: Path) -> None:
    """resume=auto model.n_layer=2 on a 4-layer run said "drop ckpt_path to start a new run": no ckpt_path was
    typed. The checkpoint resume=auto found is refused with a new hydra.run.dir as the way out."""
    import dataclasses
    import json

    import torch
    from omegaconf import OmegaConf

    from gptlab.checkpoint.reader import check_resumable
    from gptlab.model import GPTConfig

    trained = GPTConfig.from_dict(OmegaConf.to_container(compose_config(RUN, tmp_path).model, resolve=True))
    path = tmp_path / "last.ckpt"
    recorded = {"model": json.loads(json.dumps(trained.to_dict()))}
    torch.save({"state_dict": {}, "optimizer_states": [{}], "hyper_parameters": recorded}, path)
    wanted = dataclasses.replace(trained, n_layer=trained.n_layer + 1)
    with pytest.raises(ConfigError, match=r"or give a new hydra.run.dir \(without resume=auto\) to start") as err:
        check_resumable(path, wanted, found_in_run_dir=True)
    assert "drop ckpt_path" not in str(err.value)
    with pytest.raises(ConfigError, match="or drop ckpt_path to start a new run"):
        check_resumable(path, wanted)  # ckpt_path typed: dropping it is the way out
