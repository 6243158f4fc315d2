"""logger=mlflow's SQLite store written by a sweep's jobs at once: real processes, released together on a new store
(the case that breaks: each finds the tables missing and creates them), each writing many small transactions."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="logger=mlflow's tests need the mlflow package (the test extra installs it)")

from mlflow import MlflowClient  # noqa: E402  (imported before the fork: the writers start without imports)

from gptlab.train.mlflow_logger import RunMLFlowLogger, retrying  # noqa: E402

WRITERS = 4
STEPS = 15


def _write(uri: str, run_dir: str, index: int, start: multiprocessing.Barrier) -> None:
    start.wait()  # all at once, on a store none of them has opened
    logger = RunMLFlowLogger(tracking_uri=uri, save_dir=run_dir, experiment_name="race", run_name=f"job{index}")
    logger.log_hyperparams({"index": index, "name": f"job{index}"})
    for step in range(1, STEPS + 1):  # a transaction each, as training logs them
        logger.log_metrics({"train/loss": index + step / 100, "epoch": 0}, step=step)
    logger.log_sample("samples/0", f"text of job {index}", STEPS)
    logger.finalize("success")


def test_concurrent_jobs_on_a_new_sqlite_store_lose_nothing(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    fork = multiprocessing.get_context("fork")
    start = fork.Barrier(WRITERS)
    writers = [fork.Process(target=_write, args=(uri, str(tmp_path / f"run{i}"), i, start)) for i in range(WRITERS)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=600)
    assert [w.exitcode for w in writers] == [0] * WRITERS

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"job{i}" for i in range(WRITERS)]  # one experiment, every run
    for run in runs:
        index = int(run.data.params["index"])
        history = client.get_metric_history(run.info.run_id, "train/loss")
        assert sorted((m.step, m.value) for m in history) == [
            (s, pytest.approx(index + s / 100)) for s in range(1, STEPS + 1)]
        assert "epoch" not in run.data.metrics and run.info.status == "FINISHED"
        assert run.data.tags["gptlab.run_dir"] == str((tmp_path / f"run{index}").resolve())
        text = Path(client.download_artifacts(run.info.run_id, f"samples/0/step_{STEPS:07d}.txt")).read_text()
        assert text == f"text of job {index}"
    assert not list((tmp_path / "store").glob("*.lock"))  # the opening lock is gone with its holder


def test_a_locked_store_is_tried_again_and_other_errors_are_not() -> None:
    calls = []

    def locked_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "written"

    assert retrying(locked_twice) == "written" and len(calls) == 3

    def refused() -> None:
        calls.append(1)
        raise ValueError("Changing param values is not allowed")

    calls.clear()
    with pytest.raises(ValueError):
        retrying(refused)
    assert len(calls) == 1
