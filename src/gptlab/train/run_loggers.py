"""What gptlab asks of every logger beyond Lightning's scalars, and the CSV and W&B loggers conf/logger/ ships.

Each of gptlab's loggers (these, gptlab.train.tensorboard_logger, gptlab.train.mlflow_logger) receives the same
things: every scalar without Lightning's `epoch` (gptlab counts optimizer steps), the run's hyperparameters as the
flat dotted keys TensorBoard's HParams tab shows (`model.n_layer`, not Lightning's nested module hparams), and the
text samples of callbacks.text_samples through `log_sample`. The W&B and MLflow packages are imported only when
such a logger is built (Lightning's logger classes import them lazily too).
"""

from __future__ import annotations

import csv
import io
import time
from argparse import Namespace
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only

from gptlab.atomic import atomic_write_text
from gptlab.runs.logged_files import CSV_SAMPLES_FILE, CSV_WALL_TIME
from gptlab.train.callbacks.hparams import experiment_params


def run_params(params: Union[Mapping[str, Any], Namespace]) -> dict[str, Any]:
    """The module's hparams as the loggers record them: the run config's flat experiment keys where the module
    holds one (src/train.py's runs), else the hparams as given (the Python API)."""
    params = vars(params) if isinstance(params, Namespace) else dict(params)
    return experiment_params(params["run"]) if isinstance(params.get("run"), Mapping) else params


def without_epoch(metrics: Mapping[str, float]) -> dict[str, float]:
    """Lightning adds `epoch` to a dict logged without a step (gptlab.train.step_axis gives fitting's theirs)."""
    return {k: v for k, v in metrics.items() if k != "epoch"}


class RunCSVLogger(CSVLogger):
    """metrics.csv (a row per logged dict, a column per scalar, and when it was logged: wall_time, as TensorBoard
    keeps for each point), hparams.yaml, and samples.csv (step, tag, text)."""

    def __init__(self, save_dir: str, name: str = "csv", version: Any = "", **kwargs: Any) -> None:
        super().__init__(save_dir, name=name, version=version if version != "" else None, **kwargs)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        super().log_metrics({**without_epoch(metrics), CSV_WALL_TIME: time.time()}, step)

    @rank_zero_only
    def log_hyperparams(self, params: Union[dict[str, Any], Namespace], *args: Any, **kwargs: Any) -> None:
        super().log_hyperparams(run_params(params))

    @rank_zero_only
    def log_sample(self, tag: str, text: str, step: int) -> None:
        """Rewrites samples.csv whole with the new row (a few rows per validation): never a half-written row."""
        path = Path(self.log_dir) / CSV_SAMPLES_FILE
        old = path.read_text() if path.exists() else "step,tag,text\r\n"
        row = io.StringIO()
        csv.writer(row).writerow([step, tag, text])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, old + row.getvalue())


class RunWandbLogger(WandbLogger):
    """Weights & Biases, offline unless `offline=false`: the run lands in <run dir>/wandb/offline-run-*/, no account
    and no network; `wandb sync <that dir>` uploads it later. Each text sample is a one-row table under its tag."""

    def __init__(self, save_dir: str, offline: bool = True, project: str = "gptlab", name: str = "",
                 **kwargs: Any) -> None:
        super().__init__(name=name or None, save_dir=save_dir, offline=offline, project=project, **kwargs)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        super().log_metrics(without_epoch(metrics), step)

    @rank_zero_only
    def log_hyperparams(self, params: Union[dict[str, Any], Namespace], *args: Any, **kwargs: Any) -> None:
        super().log_hyperparams(run_params(params))

    @rank_zero_only
    def log_sample(self, tag: str, text: str, step: int) -> None:
        self.log_text(tag, columns=["step", "text"], data=[[step, text]], step=step)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Ends the W&B run: the jobs of a sweep in one process (Hydra's basic launcher) each get their own run,
        where Lightning's logger would hand the next job the run still open."""
        import wandb

        super().finalize(status)
        if wandb.run is not None:  # the run this process's logger opened (W&B keeps one per process)
            wandb.run.finish(exit_code=0 if status in ("success", "finished") else 1)
