"""The run's hyperparameters with `hp/best_val_loss`, so TensorBoard's HParams tab lines up the runs of a sweep."""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.tensorboard.summary import hparams

METRIC = "hp/best_val_loss"
# The parts of the run config that describe the experiment (paths, callbacks and logging do not).
GROUPS = ("model", "optimizer", "scheduler", "data", "tokenizer", "trainer")


def flatten(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """`{"model": {"n_layer": 4}}` -> `("model.n_layer", 4)`; what TensorBoard cannot show becomes a string."""
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        elif key != "_partial_":
            yield name, value if isinstance(value, (bool, int, float, str)) else str(value)


class HParamsSummary(L.Callback):
    """At fit start, declares the hyperparameters (the module's `run` hparams) and `hp/best_val_loss` to
    TensorBoard; after each validation, logs the best val/loss so far. The best survives a resume."""

    def __init__(self) -> None:
        self.best = math.inf

    def state_dict(self) -> dict[str, float]:
        return {"best": self.best}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.best = state_dict["best"]

    @staticmethod
    def _loggers(trainer: L.Trainer) -> list[TensorBoardLogger]:
        return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]

    @rank_zero_only
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        run = pl_module.hparams.get("run") or {}
        params = dict(flatten({k: v for k, v in run.items() if k in GROUPS or not isinstance(v, Mapping)}))
        params.pop("ckpt_path", None)
        # Only declares the metric's name; its values come from the scalars logged below.
        summaries = hparams(params, {METRIC: 0.0})
        for logger in self._loggers(trainer):
            writer = logger.experiment._get_file_writer()  # as TensorBoardLogger.log_hyperparams does
            for summary in summaries:
                writer.add_summary(summary)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        if loss is None or trainer.sanity_checking:
            return
        self.best = min(self.best, float(loss))
        if trainer.is_global_zero:
            for logger in self._loggers(trainer):
                logger.log_metrics({METRIC: self.best}, step=trainer.global_step)
