"""`python src/train.py -m campaign=NAME ...` records the sweep in the campaign's ledger when it ends and tests it,
as `scripts/campaign.py add` does; an unknown campaign, or a single run, is refused in one line before anything is
written. The baseline is a synthetic sweep (test_campaign_ledger.sweep); the variant's sweep really trains."""

from __future__ import annotations

from pathlib import Path

from helpers import TINY, run_train
from test_campaign_ledger import in_child, sweep

from gptlab.campaign import actions, ledger

STEPS = ["trainer.max_steps=2", "trainer.val_check_interval=2", "callbacks.text_samples=null"]


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/outputs/mlflow.db"


def test_a_sweep_under_a_campaign_is_recorded_and_tested_when_it_ends(tmp_path: Path) -> None:
    uri = _store(tmp_path)
    base = sweep(tmp_path, "base", {"model.norm": "pre"}, [3.00, 3.05, 2.97])
    assert in_child(actions.start, uri, "c", base, 0.05, None, None) == 0
    proc = run_train(["-m", *TINY, *STEPS, "campaign=c", "model.norm=post", "seed=1,2,3",
                      f"hydra.sweep.dir={tmp_path / 'variant'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the sweep is recorded in campaign c (sqlite:///outputs/mlflow.db)" in proc.stdout, proc.stdout[-3000:]
    campaign = ledger.load(uri, "c")
    runs = [r for r in campaign.of("run") if "model.norm=post" in r.tag("variant")]
    assert sorted(r.tag("seed") for r in runs) == ["1", "2", "3"]
    assert not any("campaign=" in r.tag("variant") for r in campaign.of("run"))  # a setting, not the variant
    assert [v.tag("variant") for v in campaign.of("verdict")] == [runs[0].tag("variant")]


def test_an_unknown_campaign_or_a_single_run_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    for args, says in ((["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                        "no campaign nope in sqlite:///outputs/mlflow.db (no such file yet); start one: python "
                        "scripts/campaign.py init nope"),
                       ([f"hydra.run.dir={tmp_path / 'run'}"], "launch one with -m: python src/train.py -m "
                                                               "campaign=nope seed=1,2,3")):
        proc = run_train([*args, *TINY, "campaign=nope"], cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr[-3000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gptlab: error: ") and says in lines[0], proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == []  # no sweep dir, run dir or store
