"""The campaign's MLflow tracking store: an embedded SQLite file under outputs/ by default (no server), or any
tracking URI (a team's server or database). Writers are serialised by an flock (gptlab.dir_lock): beside a SQLite
file, so a multirun's jobs, several launchers and a SLURM array's jobs on one file system write one at a time; for a
server, in this user's cache, so this machine's writers do. SQLite's own "database is locked" (a writer outside
gptlab, such as logger=mlflow) is waited out and retried."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from gptlab import dir_lock
from gptlab.errors import ConfigError

STORE_ENV = "GPTLAB_TRACKING_URI"
RETRIES = 60
T = TypeVar("T")


def default_store() -> str:
    """paths.tracking_uri's default with paths.log_dir's (sqlite:///outputs/mlflow.db): the store logger=mlflow
    writes to, read from the one schema that says where it is."""
    from dataclasses import fields

    from gptlab.config.schemas import Paths

    default = {f.name: f.default for f in fields(Paths)}
    return default["tracking_uri"].replace("${paths.log_dir}", default["log_dir"])


def store_uri(given: str | None) -> str:
    return given or os.environ.get(STORE_ENV) or default_store()


def sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def client(uri: str) -> Any:
    """An MlflowClient on the store; the SQLite file's dir is created (the store makes the file)."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ConfigError("campaigns keep their ledger in MLflow, which is not installed: pip install -e "
                          "'.[campaign]' (or pip install mlflow online-fdr).") from None
    path = sqlite_path(uri)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return retried(lambda: MlflowClient(tracking_uri=uri))


def retried(call: Callable[[], T]) -> T:
    """`call()`, again after a pause while SQLite says another writer holds the file."""
    for attempt in range(RETRIES):
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - MLflow wraps SQLAlchemy's OperationalError in its own types
            if "locked" not in str(err) or attempt == RETRIES - 1:
                raise
            time.sleep(0.2 + 0.05 * attempt)
    raise AssertionError("unreachable")


def lock_path(uri: str) -> Path:
    """The flock that serialises this store's campaign writers: beside a SQLite file (every machine that mounts it
    takes it), else one per store URI in this user's cache (a server's writers on this machine)."""
    path = sqlite_path(uri)
    if path is not None:
        return path.with_name(path.name + ".lock")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "gptlab" / "campaign-locks" / (hashlib.sha256(uri.encode()).hexdigest()[:16] + ".lock")


@contextlib.contextmanager
def writing(uri: str) -> Iterator[None]:
    """One campaign writer at a time on this store: for a SQLite file, on every machine that shares it; for a
    server, on this machine only (MLflow has no lock a client can take: docs/campaigns.md)."""
    path = lock_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = dir_lock.wait_lock(path, lambda who: print(f"waiting for {who}", flush=True))
    try:
        yield
    finally:
        dir_lock.release(fd)
