"""The run's hyperparameters with `val-best/loss` and `val-best/bpb`, so TensorBoard's HParams tab lines up
the runs of a sweep, its swept keys as the table's columns."""

from __future__ import annotations

from typing import Any, Mapping

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from gptlab.lightning_internals import tensorboard_file_writer
from gptlab.runs.flat_config import flatten
from gptlab.runs.sweep_jobs import swept_overrides
from gptlab.train.tensorboard_summaries import hparams_summaries

METRICS = ("val-best/loss", "val-best/bpb")  # bpb: at the best val/loss, comparable across tokenizers
# The parts of the run config that describe the experiment (paths, callbacks and logging do not).
GROUPS = ("model", "optimizer", "scheduler", "data", "tokenizer", "trainer")


def experiment_params(run: Mapping[str, Any]) -> dict[str, Any]:
    """The run config's keys that describe the experiment, flat (`model.n_layer`): what the HParams tab lines up
    and what every logger records as the run's hyperparameters (gptlab.train.run_loggers)."""
    params = dict(flatten({k: v for k, v in run.items() if k in GROUPS or not isinstance(v, Mapping)}))
    params.pop("ckpt_path", None)
    for key, value in swept_overrides().items():  # a group's choice (`model=gpt2_small`) is no flattened key: add it
        params.setdefault(key, value if isinstance(value, (bool, int, float, str)) else str(value))
    return params


class HParamsSummary(L.Callback):
    """At fit start, declares the hyperparameters (the module's `run` hparams) and the METRICS to TensorBoard.
    The values of those metrics are the scalars GPTLitModule logs after each validation. The other loggers get the
    same hyperparameters from Lightning's own log_hyperparams call (gptlab.train.run_loggers)."""

    @rank_zero_only
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        params = experiment_params(pl_module.hparams.get("run") or {})
        # names the metrics (their values are the logged scalars) and, in a sweep, the swept keys first and alone
        summaries = hparams_summaries(params, METRICS, swept_overrides())
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                writer = tensorboard_file_writer(logger.experiment)  # as TensorBoardLogger.log_hyperparams does
                for summary in summaries:
                    writer.add_summary(summary)
