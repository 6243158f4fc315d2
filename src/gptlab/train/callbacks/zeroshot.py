"""Zero-shot task metrics during training (callbacks.zero_shot): eval/<task>/<metric> every N optimizer steps."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

import lightning as L

from gptlab.eval.tasks import DEFAULT_DATA, Example
from gptlab.eval.zeroshot import check_tasks, evaluate_tasks, load_examples
from gptlab.execution.fsdp_strategy import shards_weights

log = logging.getLogger(__name__)


class ZeroShotEval(L.Callback):
    """Scores `tasks` (gptlab.eval.zeroshot) every `every_n_steps` optimizer steps and logs `eval/<task>/<metric>`
    (e.g. eval/lambada/acc, eval/lambada/ppl, eval/hellaswag/acc_norm). With tasks=[] (the default) it does nothing.

    Rank 0 alone scores, with no collective: under DDP the other ranks wait for it in the next step's gradient
    all-reduce, so keep `limit` small enough that one evaluation stays far below the process group's timeout
    (minutes). Under FSDP each rank holds a shard of the weights, so the callback stays off there. The data is read
    at fit start on every rank, so a missing dataset stops all ranks alike before training."""

    def __init__(self, tasks: Sequence[str] = (), every_n_steps: int = 500, limit: Optional[int] = 500,
                 batch_size: int = 16, data: Mapping[str, str] = DEFAULT_DATA) -> None:
        self.tasks = check_tasks(list(tasks), "callbacks.zero_shot.tasks")
        self.every_n_steps, self.limit, self.batch_size = every_n_steps, limit, batch_size
        self.data = dict(data or {})
        check_tasks(list(self.data), "callbacks.zero_shot.data")
        self._examples: dict[str, list[Example]] = {}
        self._last_step = -1

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.tasks:
            return
        if shards_weights(trainer.strategy):
            log.warning("callbacks.zero_shot is off under FSDP (the weights are sharded across ranks).")
            self.tasks = []
            return
        self._examples = load_examples(self.tasks, self.data, self.limit, "callbacks.zero_shot.data",
                                       "callbacks.zero_shot.limit")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_step = trainer.global_step  # a resumed run does not re-score the step it resumed at

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step  # optimizer steps taken; unchanged across the micro-batches of one step
        if not self.tasks or step == self._last_step or step % self.every_n_steps:
            return
        self._last_step = step
        if not trainer.is_global_zero:
            return
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if tokenizer is None:
            log.warning("callbacks.zero_shot: the datamodule has no tokenizer; nothing scored.")
            return
        with trainer.precision_plugin.forward_context():  # the run's own precision (autocast for *-mixed)
            results = evaluate_tasks(pl_module.model, tokenizer, self._examples, self.batch_size)
        metrics = {f"zero_shot/{key}": value for key, value in results.items() if not key.endswith("/n")}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        log.info("step %d: %s", step, ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
