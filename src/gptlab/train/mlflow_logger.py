"""logger=mlflow: Lightning's MLFlowLogger writing to paths.tracking_uri (an SQLite file under outputs/ by default),
safe when a sweep's jobs write to that one file at once.

SQLite lets one process write at a time. MLflow waits up to 20 s for a busy file (PRAGMA busy_timeout), but two
cases still fail in a multirun: the first processes to open a new store all find its tables missing and all run
MLflow's schema migrations over each other ("duplicate column name"), and a transaction that read before it wrote
is refused at once ("database is locked") when another process wrote meanwhile, whatever the timeout. So the store
is opened under a file lock beside the SQLite file (the first opener creates the tables, the others find them), and
every call to the store that fails with "database is locked" is made again after a pause: a write is one
transaction, refused whole, so trying again loses and doubles nothing. Two jobs creating the same experiment at
once: the second finds the first's.

Each run is tagged with its run dir (RUN_DIR_TAG), so a report finds a job's MLflow run from its dir
(gptlab.report.logged_scalars) and a run resumed in its dir continues the same MLflow run. Text samples are
artifacts samples/<i>/step_<N>.txt; a new experiment keeps its artifacts beside the SQLite file (mlartifacts/),
not in MLflow's default ./mlruns of whatever dir the job ran from.
"""

from __future__ import annotations

import logging
import random
import time
from argparse import Namespace
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Union

from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only

from gptlab import dir_lock
from gptlab.lightning_internals import use_mlflow_client
from gptlab.runs.logged_files import MLFLOW_RUN_DIR_TAG as RUN_DIR_TAG
from gptlab.train.run_loggers import run_params, without_epoch

log = logging.getLogger(__name__)

LOCKED = "database is locked"
RETRY_FOR_S = 600.0  # a writer kept out this long by others is a store that is stuck, not busy: the error shows
FIRST_PAUSE_S = 0.05


def sqlite_file(tracking_uri: str) -> Optional[Path]:
    """The file of an SQLite store URI (`sqlite:///relative/x.db`, `sqlite:////abs/x.db`); None for any other."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri.removeprefix("sqlite:///"))


def _locked(err: BaseException) -> bool:
    while err is not None:
        if LOCKED in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def retrying(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)`, made again while the store answers "database is locked" (pauses doubling, jittered,
    up to RETRY_FOR_S in all)."""
    pause, waited = FIRST_PAUSE_S, 0.0
    while True:
        try:
            return call(*args, **kwargs)
        except Exception as err:
            if not _locked(err) or waited >= RETRY_FOR_S:
                raise
        nap = pause * (0.5 + random.random())
        time.sleep(nap)
        waited, pause = waited + nap, min(pause * 2, 2.0)


class RetryingClient:
    """An MlflowClient whose every call is `retrying`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr
        return lambda *args, **kwargs: retrying(attr, *args, **kwargs)


@contextmanager
def opening(store: Optional[Path]) -> Iterator[None]:
    """Held while a process opens an SQLite store (MlflowClient creates a new store's tables as it is made): one
    process at a time, beside the store's file; nothing for a store of another kind."""
    if store is None:
        yield
        return
    store.parent.mkdir(parents=True, exist_ok=True)
    fd = dir_lock.wait_lock(store.with_name(store.name + ".lock"), lambda who: None)
    try:
        yield
    finally:
        dir_lock.release(fd)


def _experiment_id(client: RetryingClient, name: str, artifact_location: Optional[str]) -> str:
    """The experiment's id, made here if it is new: a job that lost the race to make it finds the winner's."""
    for _ in range(2):
        found = client.get_experiment_by_name(name)
        if found is not None and found.lifecycle_stage != "deleted":
            return found.experiment_id
        try:
            return client.create_experiment(name, artifact_location)
        except Exception as err:
            if "already exists" not in str(err).lower() and "unique constraint" not in str(err).lower():
                raise
    raise RuntimeError(f"MLflow experiment {name!r} was neither found nor made")  # deleted between the two calls


def _run_of_dir(client: RetryingClient, experiment_id: str, run_dir: str) -> Optional[str]:
    """The MLflow run `run_dir` logged to before (a run resumed in its dir), to go on with; None for a new run."""
    runs = client.search_runs([experiment_id], f"tags.`{RUN_DIR_TAG}` = '{run_dir}'", max_results=1,
                              order_by=["attributes.start_time DESC"])
    return runs[0].info.run_id if runs else None


class RunMLFlowLogger(MLFlowLogger):
    def __init__(self, tracking_uri: str, save_dir: str, experiment_name: str = "gptlab", run_name: str = "",
                 artifact_location: Optional[str] = None, tags: Optional[dict[str, Any]] = None,
                 **kwargs: Any) -> None:
        from mlflow.tracking import MlflowClient

        store = sqlite_file(tracking_uri)
        if artifact_location is None and store is not None:
            artifact_location = (store.resolve().parent / "mlartifacts").as_uri()
        self._run_dir = str(Path(save_dir).resolve())
        with opening(store):  # MlflowClient makes a new store's tables
            client = RetryingClient(retrying(MlflowClient, tracking_uri))
        run_id = None
        if rank_zero_only.rank == 0:  # Lightning's logger touches the store on rank 0 only; so does this
            run_id = _run_of_dir(client, _experiment_id(client, experiment_name, artifact_location), self._run_dir)
        retrying(super().__init__, experiment_name=experiment_name, run_name=run_name or None,
                 tracking_uri=tracking_uri, tags={**(tags or {}), RUN_DIR_TAG: self._run_dir}, save_dir=save_dir,
                 artifact_location=artifact_location, run_id=run_id, **kwargs)
        use_mlflow_client(self, client)  # every call Lightning makes to the store is made again when locked

    @property
    def save_dir(self) -> Optional[str]:
        """The run dir (what the tracking store is keyed by: RUN_DIR_TAG), so a resumed run re-logs its last step
        here too (gptlab.train.callbacks.relog)."""
        return self._run_dir

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        super().log_metrics(without_epoch(metrics), step)

    @rank_zero_only
    def log_hyperparams(self, params: Union[dict[str, Any], Namespace], *args: Any, **kwargs: Any) -> None:
        """The experiment's keys, each value whole where MLflow allows (6000 characters; Lightning cuts at 250).
        A resumed run's values are the same: MLflow refuses a param changed, not one logged again."""
        from mlflow.entities import Param

        before = self.experiment.get_run(self.run_id).data.params  # a resumed run's
        values = {k: str(v)[:6000] for k, v in run_params(params).items()}
        changed = sorted(k for k, v in values.items() if k in before and before[k] != v)
        if changed:
            log.warning(f"MLflow keeps a run's first value of a hyperparameter: {', '.join(changed)} changed since "
                        f"this run dir's MLflow run {self.run_id} began and keep their first values there.")
        params_list = [Param(key=k, value=v) for k, v in values.items() if k not in before]
        for start in range(0, len(params_list), 100):  # MLflow takes at most 100 per batch
            self.experiment.log_batch(run_id=self.run_id, params=params_list[start:start + 100])

    @rank_zero_only
    def log_sample(self, tag: str, text: str, step: int) -> None:
        self.experiment.log_text(self.run_id, text, f"{tag}/step_{step:07d}.txt")
