"""Where each logger of conf/logger/ puts a run's scalars: the names its writers (gptlab.train.run_loggers,
gptlab.train.mlflow_logger) and its readers (gptlab.report.logged_scalars) share."""

from __future__ import annotations

CSV_SAMPLES_FILE = "samples.csv"  # the CSV logger's text samples (step, tag, text), beside its metrics.csv
CSV_METRICS_FILE = "metrics.csv"  # Lightning's CSVLogger's: a row per logged dict, a column per scalar
CSV_WALL_TIME = "wall_time"  # the CSV logger's column of when each row was logged (seconds since the epoch)
MLFLOW_RUN_DIR_TAG = "gptlab.run_dir"  # the resolved run dir an MLflow run logged from
WANDB_DIR = "wandb"  # W&B's dir in the run dir: offline-run-<time>-<id>/run-<id>.wandb
