"""The campaign's ledger in a real MLflow store (a SQLite file): concurrent writers lose nothing, a writer killed
mid-record leaves nothing half-counted, two campaigns in one store stay apart, verdicts get the levels LORD++ grants
in order, a claimed win is confirmed on fresh seeds and promoted, and wall-clock verdicts across machines are
refused. Sweeps are synthetic job dirs (tests/test_report_stats.make_job): no training."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
from pathlib import Path

import pytest
from helpers import run_script
from test_report_stats import make_job

from gptlab.campaign import actions, confirm, fdr, ledger, view
from gptlab.errors import ConfigError

BASE = [3.00, 3.05, 2.97]
FORK = multiprocessing.get_context("fork")


def sweep(root: Path, name: str, overrides: dict[str, str], finals: list[float], seeds=(1, 2, 3),
          extra: dict | None = None) -> Path:
    for i, (seed, final) in enumerate(zip(seeds, finals)):
        make_job(root / name, i, {**overrides, "seed": str(seed)}, [final + 0.5, final], extra=extra)
    return root / name


def in_child(target, *args) -> int:
    """Run `target(*args)` in a forked process (the parent never opened the store, so no connection is shared)."""
    child = FORK.Process(target=target, args=args)
    child.start()
    child.join(300)
    return child.exitcode


def _make_store(uri: str) -> None:
    from gptlab.campaign.store import client

    client(uri).search_experiments()


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store with MLflow's tables made (its migrations are most of a new store's cost), copied per test."""
    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    assert in_child(_make_store, f"sqlite:///{path}") == 0
    return path


@pytest.fixture
def uri(tmp_path: Path, empty_store: Path) -> str:
    (tmp_path / "store").mkdir()
    shutil.copy(empty_store, tmp_path / "store" / "mlflow.db")
    return f"sqlite:///{tmp_path}/store/mlflow.db"


def start(uri: str, root: Path, name: str = "c", budget: str | None = "tokens") -> None:
    assert in_child(actions.start, uri, name, sweep(root, f"{name}-base", {"model.norm": "pre"}, BASE), 0.05,
                    budget, None) == 0


def test_concurrent_writers_lose_nothing_and_test_in_one_sequence(uri: str, tmp_path: Path) -> None:
    start(uri, tmp_path)
    sweeps = [sweep(tmp_path, f"v{i}", {"model.norm": "pre", "optimizer.lr": f"{i}e-3"},
                    [b - 0.01 * (i % 3) + 0.001 * k for k, b in enumerate(BASE)]) for i in range(8)]
    children = [FORK.Process(target=actions.add, args=(uri, "c", s)) for s in sweeps]
    for child in children:
        child.start()
    for child in children:
        child.join(300)
    assert [c.exitcode for c in children] == [0] * 8
    campaign = ledger.load(uri, "c")
    assert len(campaign.of("run")) == 3 + 8 * 3 and campaign.half_written == 0
    verdicts = campaign.of("verdict")
    assert sorted(int(v.metrics["index"]) for v in verdicts) == list(range(1, 9))  # one sequence, no index twice
    granted = fdr.replay([v.metrics["p"] for v in verdicts], 0.05)
    assert [v.metrics["level"] for v in verdicts] == pytest.approx([g.level for g in granted])


def _killed_while_writing(uri: str, sweep_dir: Path, stage: str) -> None:
    """`add` whose second record dies by SIGKILL at `stage` of its write (after create_run or after log_batch)."""
    from mlflow.tracking import MlflowClient

    calls = {"n": 0}
    original = getattr(MlflowClient, stage)

    def dying(self, *args, **kwargs):
        calls["n"] += 1
        result = original(self, *args, **kwargs)
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(MlflowClient, stage, dying)
    actions.add(uri, "c", sweep_dir)


@pytest.mark.parametrize("stage", ["create_run", "log_batch"])
def test_a_writer_killed_mid_record_leaves_the_ledger_consistent(uri: str, tmp_path: Path, stage: str) -> None:
    start(uri, tmp_path)
    variant = sweep(tmp_path, "v", {"model.norm": "post"}, [2.90, 2.95, 2.86])
    assert in_child(_killed_while_writing, uri, variant, stage) == -signal.SIGKILL
    campaign = ledger.load(uri, "c")
    assert len(campaign.of("run")) == 4 and campaign.half_written == 1 and not campaign.of("verdict")
    assert all("final_val_loss" in r.metrics and r.tag("variant") for r in campaign.of("run"))  # whole records only
    assert in_child(actions.add, uri, "c", variant) == 0  # the same command again completes it (the lock was freed)
    campaign = ledger.load(uri, "c")
    assert len(campaign.of("run")) == 6 and len(campaign.of("verdict")) == 1
    assert "half-written" in view.markdown(campaign)


def test_two_campaigns_in_one_store_do_not_mix(uri: str, tmp_path: Path) -> None:
    start(uri, tmp_path, "one")
    start(uri, tmp_path, "two")
    assert in_child(actions.add, uri, "one", sweep(tmp_path, "a", {"model.norm": "post"}, [2.9, 2.95, 2.86])) == 0
    assert in_child(actions.add, uri, "two", sweep(tmp_path, "b", {"model.pos_emb": "none"}, [3.1, 3.2, 3.0])) == 0
    one, two = view.as_json(ledger.load(uri, "one")), view.as_json(ledger.load(uri, "two"))
    assert [v["variant"] for v in one["variants"]] == ["baseline", "model.norm=post"]
    assert [v["variant"] for v in two["variants"]] == ["baseline", "model.norm=(default) model.pos_emb=none"]
    assert one["tests"] == two["tests"] == 1 and one["variants"][1]["verdict"]["index"] == 1


def test_a_claim_is_confirmed_on_fresh_seeds_then_becomes_the_baseline(uri: str, tmp_path: Path) -> None:
    start(uri, tmp_path)
    post = {"model.norm": "post"}
    assert in_child(actions.add, uri, "c", sweep(tmp_path, "v", post, [2.80, 2.86, 2.78])) == 0
    campaign = ledger.load(uri, "c")
    row = view.rows(campaign)[1]
    assert row["status"] == "claimed" and row["verdict"]["p"] <= row["verdict"]["level"]
    fresh = confirm.fresh_seeds(campaign, 3)
    assert fresh == [4, 5, 6]
    for name, overrides, finals in (("cb", {"model.norm": "pre"}, BASE), ("cv", post, [2.80, 2.87, 2.77])):
        assert in_child(actions.add, uri, "c", sweep(tmp_path, name, overrides, finals, fresh), None,
                        actions.CONFIRM, False) == 0
    with pytest.raises(ConfigError, match="only a confirmed win becomes the baseline"):
        confirm.promote(uri, "c", "model.norm=post")
    assert confirm.judge_confirmation(uri, "c", "model.norm=post").tag("status") == "confirmed"
    confirm.promote(uri, "c", "model.norm=post")
    data = view.as_json(ledger.load(uri, "c"))
    assert data["baselines"] == ["baseline", "model.norm=post"]
    assert [v["status"] for v in data["variants"]] == ["former baseline", "baseline"]


def test_a_wall_clock_verdict_across_machines_is_refused_by_name(uri: str, tmp_path: Path) -> None:
    assert in_child(actions.start, uri, "w", sweep(tmp_path, "b", {"model.norm": "pre"}, BASE), 0.05, "seconds",
                    None) == 0
    assert in_child(actions.add, uri, "w", sweep(tmp_path, "v", {"model.norm": "post"}, [2.8, 2.86, 2.78]), None,
                    actions.EXPLORE, True, "NVIDIA H100") == 0
    row = view.rows(ledger.load(uri, "w"))[1]
    assert row["verdict"] is None and row["status"].startswith("untested: wall-clock verdict refused")
    assert "NVIDIA H100" in row["status"]


def test_a_seconds_budget_matches_on_the_seconds_of_training_steps(uri: str, tmp_path: Path) -> None:
    """budget=seconds:N bounds a run's training steps (validation not counted): the summary's train_seconds, not
    its fit_seconds, is what the arms must share."""
    at = {"train_seconds": 60.0, "fit_seconds": 75.0}
    assert in_child(actions.start, uri, "s", sweep(tmp_path, "b", {"model.norm": "pre"}, BASE, extra=at), 0.05,
                    "seconds", None) == 0
    validated_more = {"train_seconds": 60.3, "fit_seconds": 90.0}
    assert in_child(actions.add, uri, "s", sweep(tmp_path, "v", {"model.norm": "post"}, [2.8, 2.86, 2.78],
                                                 extra=validated_more)) == 0
    assert view.rows(ledger.load(uri, "s"))[1]["verdict"] is not None
    longer = {"train_seconds": 90.0, "fit_seconds": 105.0}
    assert in_child(actions.add, uri, "s", sweep(tmp_path, "w", {"model.pos_emb": "none"}, [2.8, 2.86, 2.78],
                                                 extra=longer)) == 0
    row = view.rows(ledger.load(uri, "s"))[2]
    assert row["verdict"] is None and "unmatched budget: seconds range 60..90" in row["status"]


def test_the_cli_prints_versioned_json_and_refuses_in_one_line(uri: str, tmp_path: Path) -> None:
    start(uri, tmp_path)
    out = run_script("scripts/campaign.py", ["list", "c", "--json", "--store", uri], check=True)
    data = json.loads(out.stdout)
    assert data["schema"] == ledger.SCHEMA and data["q"] == 0.05 and data["wealth_left"] == 0.025
    assert data["variants"][0]["status"] == "baseline" and data["variants"][0]["seeds"] == ["1", "2", "3"]
    missing = run_script("scripts/campaign.py", ["list", "nope", "--store", uri])
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no campaign nope" in missing.stderr and "campaign.py init nope" in missing.stderr


def test_the_report_in_a_campaign_adds_levels_and_its_json_matches_the_markdown(uri: str, tmp_path: Path) -> None:
    from gptlab.campaign.report_part import sweep_in_campaign
    from gptlab.report.verdicts_json import sweep_verdicts

    start(uri, tmp_path)
    mixed = sweep(tmp_path, "m", {"model.norm": "post"}, [2.80, 2.86, 2.78])
    for i, (seed, final) in enumerate(zip((1, 2, 3), [3.01, 3.04, 2.98])):
        make_job(mixed, 3 + i, {"model.norm": "rms", "seed": str(seed)}, [final + 0.5, final])
    data = sweep_verdicts(mixed, "model.norm=post")
    rms = data["variants"][1]
    assert data["schema"] == 1 and data["baseline"] == "model.norm=post" and rms["verdict"]["family"] == 1
    assert rms["verdict"]["test"] == "paired t" and rms["seeds"] == {"1": 3.01, "2": 3.04, "3": 2.98}
    section = sweep_in_campaign(mixed, "c", uri, False)
    assert "## In campaign c" in section and "wealth left" in section
    assert "- model.norm=post: claimed" in section and "- model.norm=rms: not claimed" in section
    rows = sweep_in_campaign(mixed, "c", uri, True)["variants"]  # again: nothing recorded twice
    assert [r["variant"] for r in rows] == ["model.norm=post", "model.norm=rms"]
    assert [r["verdict"]["index"] for r in rows] == [1, 2] and len(ledger.load(uri, "c").of("run")) == 9
