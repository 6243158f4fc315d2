"""Zero-shot task metrics during training (callbacks.zero_shot): eval/<task>/<metric> every N optimizer steps.

An evaluation can outlast a scheduler's grace time, so a preemption signal stops it before its next scoring batch:
it is abandoned (logs nothing), PreemptionCheckpoint saves at that step and the run stops, and the checkpoint
records the cut so that `resume=auto` scores that step again first thing (the weights are those of that step;
scoring draws no random numbers, so training continues exactly as if never stopped).
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Mapping, Optional, Sequence

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from gptlab.errors import StoppedBySignal
from gptlab.eval.tasks import DEFAULT_DATA, Example
from gptlab.eval.zeroshot import check_fits, check_tasks, evaluate_tasks, load_examples
from gptlab.execution.fsdp_strategy import shards_weights
from gptlab.signals import FLAG
from gptlab.train.callbacks.preemption import PreemptionCheckpoint

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
        self._scored = -1  # the last step whose evaluation ended (logged)
        self._trainer: Optional[L.Trainer] = None
        self._resume_due: Optional[int] = None  # from the checkpoint: the step whose evaluation is still to do

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._trainer = trainer
        if not self.tasks:
            return
        if shards_weights(trainer.strategy):
            log.warning("callbacks.zero_shot is off under FSDP (the weights are sharded across ranks).")
            self.tasks = []
            return
        self._examples = load_examples(self.tasks, self.data, self.limit, "callbacks.zero_shot.data",
                                       "callbacks.zero_shot.limit")
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if tokenizer is not None:  # before the first step, not at the first zero-shot step
            context = pl_module.model.config.block_size
            check_fits(self._examples, tokenizer, context, "callbacks.zero_shot.data",
                       f", or train a longer context (model.block_size={2 * context})")

    def state_dict(self) -> dict[str, Any]:
        """A checkpoint saved at an evaluation step before its evaluation ended (cut by a preemption, or saved by
        PreemptionCheckpoint's own check, which runs first) names that step: its resume scores it."""
        step = self._trainer.global_step if self._trainer is not None else 0
        due = bool(self.tasks) and step > 0 and step % self.every_n_steps == 0 and self._scored != step
        return {"due_step": step} if due else {}  # nothing in an ordinary checkpoint

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_due = state_dict.get("due_step")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_step = self._scored = trainer.global_step  # a resumed run does not re-score its step ...
        if self.tasks and self._resume_due == trainer.global_step:  # ... unless its evaluation did not end
            self._scored = -1
            log.info("callbacks.zero_shot: scoring step %d, whose evaluation a preemption cut or preceded",
                     trainer.global_step)
            self._evaluate(trainer, pl_module, resumed=True)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A cut at the last step is saved as the final validation begins, so that validation was cut too; Lightning
        # runs no training hook when it resumes there, and FinalValidation runs the validation after the fit: this
        # evaluation goes first, as it would have.
        resumed_last = trainer.state.fn == TrainerFn.VALIDATING and self._resume_due == trainer.global_step
        if self.tasks and resumed_last:
            self._resume_due = None
            log.info("callbacks.zero_shot: scoring the last step (%d), whose evaluation a preemption cut",
                     trainer.global_step)
            self._evaluate(trainer, pl_module, resumed=True)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step  # optimizer steps taken; unchanged across the micro-batches of one step
        if not self.tasks or step == self._last_step or step % self.every_n_steps:
            return
        self._last_step = step
        self._evaluate(trainer, pl_module, resumed=False)

    def _evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule, resumed: bool) -> None:
        """Rank 0 scores; then, where a PreemptionCheckpoint acts on signals, every rank stops if any saw one."""
        step = trainer.global_step
        preemption = next((c for c in trainer.callbacks if isinstance(c, PreemptionCheckpoint)), None)
        if not trainer.is_global_zero or self._score(trainer, pl_module, step, cut=preemption is not None):
            self._scored = step
        if preemption is None:
            return
        if not resumed:
            preemption.stop_at_this_boundary(trainer)  # every rank, after rank 0 scored or was cut
        elif preemption.agree_now(trainer):  # no step since the resume: the checkpoint on disk holds this state
            raise StoppedBySignal(FLAG.consume(), f"scoring step {step}'s cut zero-shot evaluation again (nothing "
                                  "new to save)")

    def _score(self, trainer: L.Trainer, pl_module: L.LightningModule, step: int, cut: bool) -> bool:
        """Scores and logs the tasks at `step`; False if a preemption signal cut it (`cut`: one may)."""
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if tokenizer is None:
            log.warning("callbacks.zero_shot: the datamodule has no tokenizer; nothing scored.")
            return True
        batches = [0]

        def before_batch() -> None:
            if cut and FLAG.signum:
                raise _Cut()
            batches[0] += 1

        try:
            with trainer.precision_plugin.forward_context():  # the run's own precision (autocast for *-mixed)
                results = evaluate_tasks(pl_module.model, tokenizer, self._examples, self.batch_size, before_batch)
        except _Cut:
            log.warning("callbacks.zero_shot: the evaluation at step %d was cut by %s after %d scoring batch(es); "
                        "it logged nothing and runs again at step %d when the run resumes", step,
                        signal.Signals(FLAG.signum).name, batches[0], step)
            return False
        metrics = {f"zero_shot/{key}": value for key, value in results.items() if not key.endswith("/n")}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        log.info("step %d: %s", step, ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        return True


class _Cut(Exception):
    """Raised between scoring batches on a preemption signal: the evaluation is abandoned."""
