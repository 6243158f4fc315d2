"""A job's scalars from whichever logger it ran with, for a job without TensorBoard events (logger=csv, mlflow or
wandb): the same {tag: {optimizer steps done: (wall time, value)}} as job_scalars.read_scalars, and the job's first
time. The loggers log the steps TensorBoard's events do (gptlab.train.step_axis), so the points are the same.

Which loggers a job ran with is in its config_resolved.yaml (`logger:`); each is read from where gptlab's logger of
that kind writes (gptlab.runs.logged_files): the CSV logger's metrics.csv, the MLflow run tagged with the job dir in
the store the job logged to, W&B's offline run file. A job whose only logger keeps nothing readable here (W&B
online) is refused with the logger to add.
"""

from __future__ import annotations

import csv
import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import yaml

from gptlab.errors import ConfigError
from gptlab.runs.logged_files import CSV_METRICS_FILE, CSV_WALL_TIME, MLFLOW_RUN_DIR_TAG, WANDB_DIR
from gptlab.runs.run_dir import RESOLVED_CONFIG

Scalars = dict[str, dict[int, tuple[float, float]]]
READ_BY_TARGET_SUFFIX = ("RunCSVLogger", "RunMLFlowLogger", "RunWandbLogger")  # the order they are tried in


def job_loggers(job_dir: Path) -> dict[str, dict[str, Any]]:
    """The job's logger nodes as it ran (its config_resolved.yaml), by their `_target_`'s class name."""
    try:
        cfg = yaml.safe_load((job_dir / RESOLVED_CONFIG).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    nodes = cfg.get("logger") or {}
    return {str(node["_target_"]).rsplit(".", 1)[-1]: node for node in nodes.values()
            if isinstance(node, dict) and "_target_" in node}


def read_logged(job_dir: Path, wanted: Callable[[str], bool]) -> tuple[Scalars, Optional[float]]:
    """The wanted tags from the first logger of the job that this can read; ({}, None) for a job that ran with no
    logger (logger=null)."""
    loggers = job_loggers(job_dir)
    readers = {"RunCSVLogger": read_csv, "RunMLFlowLogger": read_mlflow, "RunWandbLogger": read_wandb}
    for kind in READ_BY_TARGET_SUFFIX:
        if kind in loggers:
            scalars = readers[kind](job_dir, loggers[kind], wanted)
            if scalars:
                return scalars, min((t for points in scalars.values() for t, _ in points.values()), default=None)
    return {}, None


def _add(scalars: Scalars, tag: str, step: int, wall: float, value: Any) -> None:
    try:
        scalars.setdefault(tag, {})[int(step)] = (float(wall), float(value))
    except (TypeError, ValueError):  # a table (W&B's text samples), an empty CSV cell
        pass


def read_csv(job_dir: Path, node: dict[str, Any], wanted: Callable[[str], bool]) -> Scalars:
    """metrics.csv under <job dir>/<logger.csv.name>/ (later rows win for a step logged twice)."""
    scalars: Scalars = {}
    for path in sorted((job_dir / str(node.get("name") or "")).rglob(CSV_METRICS_FILE)):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                for tag, value in row.items():
                    if tag not in ("step", CSV_WALL_TIME) and value not in ("", None) and wanted(tag):
                        _add(scalars, tag, int(row["step"]), float(row.get(CSV_WALL_TIME) or "nan"), value)
    return scalars


def tracking_uri(job_dir: Path, node: dict[str, Any]) -> str:
    """The job's store; a relative SQLite path is taken from the dir the job was launched from (Hydra's record)."""
    uri = str(node.get("tracking_uri") or "")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        try:
            cwd = yaml.safe_load((job_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["runtime"]["cwd"]
            uri = "sqlite:///" + str(Path(cwd) / uri.removeprefix("sqlite:///"))
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            pass
    return uri


def read_mlflow(job_dir: Path, node: dict[str, Any], wanted: Callable[[str], bool]) -> Scalars:
    """The metric histories of the MLflow run tagged with this job dir, in the store the job logged to."""
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise ConfigError(f"{job_dir} logged its scalars to MLflow (logger=mlflow) and reading them needs the mlflow "
                          "package: pip install mlflow (or pip install -e \".[mlflow]\").") from None
    uri = tracking_uri(job_dir, node)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(str(node.get("experiment_name")))
    tag = f"tags.`{MLFLOW_RUN_DIR_TAG}` = '{job_dir.resolve()}'"
    runs = client.search_runs([experiment.experiment_id], tag) if experiment is not None else []
    scalars: Scalars = {}
    for run in runs:
        for key in filter(wanted, run.data.metrics):
            for m in client.get_metric_history(run.info.run_id, key):
                _add(scalars, key, m.step, m.timestamp / 1000, m.value)
    return scalars


def read_wandb(job_dir: Path, node: dict[str, Any], wanted: Callable[[str], bool]) -> Scalars:
    """The history rows of the job's offline W&B runs (oldest first): each row's trainer/global_step and time."""
    files = sorted((job_dir / WANDB_DIR).glob("offline-run-*/run-*.wandb"))
    if not files:
        raise ConfigError(f"{job_dir} logged its scalars to W&B online only (logger.wandb.offline=false), which this "
                          "report cannot read: read them at wandb.ai, or log to a file too, e.g. "
                          "logger=[wandb,tensorboard].")
    from wandb.proto import wandb_internal_pb2

    scalars: Scalars = {}
    for path in files:
        for data in wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            if record.WhichOneof("record_type") != "history":
                continue
            # A scalar's name is its key or a one-part nested key; a text sample is a table (samples/0 -> nrows, ...)
            row = {item.key or item.nested_key[0]: json.loads(item.value_json) for item in record.history.item
                   if item.key or len(item.nested_key) == 1}
            step, wall = row.get("trainer/global_step"), row.get("_timestamp", math.nan)
            for tag, value in row.items():
                if step is not None and wanted(tag):
                    _add(scalars, tag, step, wall, value)
    return scalars


WANDB_BLOCK = 32768  # W&B's run file is a LevelDB-style log: 32 KiB blocks of checksummed records
WANDB_HEADER = struct.Struct("<4sHB")  # ":W&B", magic 0xBEE1, version 0
RECORD_HEADER = struct.Struct("<IHB")  # crc32, length, type: 1 full, 2 first, 3 middle, 4 last


def wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file (`wandb sync` reads the same), a record cut by a kill left out."""
    data = path.read_bytes()
    if len(data) < WANDB_HEADER.size or WANDB_HEADER.unpack_from(data)[:2] != (b":W&B", 0xBEE1):
        raise ConfigError(f"{path} is not a W&B run file this report knows (its header is {data[:7]!r}): sync it "
                          "with `wandb sync`, or log to a file too, e.g. logger=[wandb,tensorboard].")
    records, part, pos = [], b"", WANDB_HEADER.size
    while pos + RECORD_HEADER.size <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < RECORD_HEADER.size:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = RECORD_HEADER.unpack_from(data, pos)
        body = data[pos + RECORD_HEADER.size:pos + RECORD_HEADER.size + length]
        pos += RECORD_HEADER.size + length
        if kind == 0 or len(body) < length:  # zeros past the last record, or a record cut short by a kill
            break
        part = body if kind in (1, 2) else part + body
        if kind in (1, 4):
            records.append(part)
            part = b""
    return records
