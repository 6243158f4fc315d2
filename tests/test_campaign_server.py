"""A campaign on a team's tracking server, and the campaign as MLflow's own UI shows it: a real `mlflow server` (on a
SQLite file, started here) that `scripts/campaign.py --store http://...` drives, four of whose writers at once lose
nothing, and whose web UI, opened in headless Chromium, lists each variant's verdict with its outcome (a screenshot
is saved). Chromium and playwright as in test_tensorboard_browser.py: without them that one test is skipped, saying
why; the server tests need only the test extra's mlflow."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, HANG_GUARD_S, ROOT
from test_campaign_ledger import BASE, sweep
from test_tensorboard_browser import CHROMIUM, needs_browser

from gptlab.campaign.ledger import TAG

VARIANTS = {"post": ({"model.norm": "post"}, [2.80, 2.86, 2.78]),  # a win, and a loss, against model.norm=pre
            "nopos": ({"model.norm": "pre", "model.pos_emb": "none"}, [3.10, 3.20, 3.02])}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """`mlflow server` on a fresh SQLite file; its URL. Killed (its whole process group) after the module: its
    graceful stop takes seconds, and the store is thrown away."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = _free_port()
    mlflow = [shutil.which("mlflow")] if shutil.which("mlflow") else [sys.executable, "-m", "mlflow"]
    log = (root / "server.log").open("w")
    proc = subprocess.Popen([*mlflow, "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                             "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"],
                            cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + HANG_GUARD_S  # a guard against a hang, not a speed limit
    while True:
        try:
            if urllib.request.urlopen(url + "/health", timeout=10).read() == b"OK":
                break
        except OSError:
            pass
        assert proc.poll() is None, (root / "server.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "mlflow server did not answer /health"
        time.sleep(0.5)
    yield url
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    log.close()


def campaign(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """scripts/campaign.py as a user runs it; its per-machine writer lock in a cache of the test's own."""
    env = {**CHECKOUT_ENV, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "campaign.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def api(url: str, path: str, body: dict | None = None) -> dict:
    """MLflow's REST API, as its UI calls it."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + "/api/2.0/mlflow/" + path, data=data,
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=60).read())


def verdict_runs(url: str, experiment_id: str) -> dict[str, dict[str, str]]:
    """Each verdict record's run name -> its tags, from the server."""
    found = api(url, "runs/search", {"experiment_ids": [experiment_id], "max_results": 1000,
                                     "filter": f"tags.`{TAG}kind` = 'verdict'"})
    return {r["info"]["run_name"]: {t["key"]: t["value"] for t in r["data"].get("tags", [])}
            for r in found.get("runs", [])}


def started(url: str, name: str, tmp_path: Path) -> str:
    """A campaign `name` on the server with a baseline on seeds 1-3 and VARIANTS added; its experiment id."""
    done = campaign(["init", name, "--baseline-sweep", str(sweep(tmp_path, f"{name}-base", {"model.norm": "pre"},
                                                                  BASE)), "--store", url], tmp_path)
    assert done.returncode == 0, done.stderr
    for label, (overrides, finals) in VARIANTS.items():
        done = campaign(["add", name, str(sweep(tmp_path, f"{name}-{label}", overrides, finals)), "--store", url],
                        tmp_path)
        assert done.returncode == 0, done.stderr
    quoted = urllib.parse.quote(name)
    return api(url, f"experiments/get-by-name?experiment_name={quoted}")["experiment"]["experiment_id"]


@pytest.fixture(scope="module")
def team(server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The campaign `team` started on the server (the UI test opens the same one); its experiment id and dir."""
    tmp_path = tmp_path_factory.mktemp("team")
    return started(server, "team", tmp_path), tmp_path


def test_a_campaign_on_a_tracking_server_is_one_setting(server: str, team: tuple[str, Path]) -> None:
    experiment, tmp_path = team
    listed = json.loads(campaign(["list", "team", "--json", "--store", server], tmp_path).stdout)
    status = {v["variant"]: v["status"] for v in listed["variants"]}
    assert status["model.norm=post"] == "claimed" and status["model.pos_emb=none"].startswith("not claimed")
    # what the server holds, as its UI reads it: a verdict per variant, named with its outcome, tagged with it
    runs = verdict_runs(server, experiment)
    assert set(runs) == {"verdict model.norm=post: claimed", "verdict model.pos_emb=none: not claimed"}
    for name, tags in runs.items():
        assert name.endswith(": " + tags[TAG + "status"]) and status[tags[TAG + "variant"]].startswith(
            tags[TAG + "status"])


WRITERS = 4


def test_writers_at_once_on_a_server_lose_nothing(server: str, tmp_path: Path) -> None:
    """Four `campaign.py add` processes at once, each a variant of 3 runs: every run and every verdict is recorded,
    and the verdicts form one sequence (each test's index once)."""
    done = campaign(["init", "busy", "--baseline-sweep", str(sweep(tmp_path, "busy-base", {"model.norm": "pre"},
                                                                   BASE)), "--store", server], tmp_path)
    assert done.returncode == 0, done.stderr
    sweeps = [sweep(tmp_path, f"lr{i}", {"optimizer.lr": f"{i + 1}e-3"},
                    [b - 0.002 * (i + 1) + 0.001 * k for k, b in enumerate(BASE)]) for i in range(WRITERS)]
    with ThreadPoolExecutor(WRITERS) as pool:
        results = list(pool.map(lambda s: campaign(["add", "busy", str(s), "--store", server], tmp_path), sweeps))
    assert [r.returncode for r in results] == [0] * WRITERS, [r.stderr for r in results]
    listed = json.loads(campaign(["list", "busy", "--json", "--store", server], tmp_path).stdout)
    tested = [v for v in listed["variants"] if v["verdict"] is not None]
    assert len(listed["variants"]) == WRITERS + 1 and len(tested) == WRITERS and listed["tests"] == WRITERS
    assert sorted(v["verdict"]["index"] for v in tested) == list(range(1, WRITERS + 1))
    experiment = api(server, "experiments/get-by-name?experiment_name=busy")["experiment"]["experiment_id"]
    kinds = [t["value"] for r in api(server, "runs/search", {"experiment_ids": [experiment], "max_results": 1000})
             ["runs"] for t in r["data"]["tags"] if t["key"] == TAG + "kind"]
    # the baseline's record and its 3 runs, 3 runs a variant, a verdict each
    assert sorted(kinds) == sorted(["baseline"] + ["run"] * 3 * (WRITERS + 1) + ["verdict"] * WRITERS)


@needs_browser
def test_mlflows_own_ui_lists_each_variants_verdict(server: str, team: tuple[str, Path], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    experiment = team[0]
    expected = set(verdict_runs(server, experiment))
    # the page docs/campaigns.md links: the campaign's runs, filtered to its verdicts
    page_url = f"{server}/#/experiments/{experiment}/runs?searchFilter=" + urllib.parse.quote(
        f'tags.`{TAG}kind` = "verdict"')
    shot = tmp_path / "mlflow_ui_verdicts.png"
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(page_url, wait_until="load", timeout=HANG_GUARD_S * 1000)
        for name in expected:  # each verdict's row, its run name with the outcome
            page.get_by_text(name, exact=True).wait_for(timeout=HANG_GUARD_S * 1000)
        page.get_by_text(f"{len(expected)} matching runs").wait_for(timeout=HANG_GUARD_S * 1000)
        page.screenshot(path=str(shot))
        browser.close()
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 0
