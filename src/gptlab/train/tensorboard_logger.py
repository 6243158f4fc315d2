"""Lightning's TensorBoardLogger without the `epoch` scalar, writing event files that say their steps count optimizer
steps done.

Lightning adds `epoch` to a logged dict that comes without a step; gptlab's epochs are pseudo-epochs of a sampler,
meaningless to a reader of a run counted in optimizer steps, and their chart sorted first on TensorBoard's opening
screen. While fitting, gptlab.train.step_axis gives every dict its step (so no `epoch`); this covers the rest.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from gptlab.execution.fused import clock, member_of_this_thread
from gptlab.runs.run_dir import STEPS_DONE_SUFFIX


class RunTensorBoardLogger(TensorBoardLogger):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The marker readers of old runs need (gptlab.runs.run_dir.STEPS_DONE_SUFFIX); TensorBoard reads every file
        # whose name holds "tfevents", whatever follows.
        super().__init__(*args, **{"filename_suffix": STEPS_DONE_SUFFIX, **kwargs})
        self._member_origin: Optional[float] = None  # a fused member's: wall time when its clock read 0

    @property
    def experiment(self) -> Any:
        writer = super().experiment
        if self._member_origin is None and member_of_this_thread() is not None:  # at the member's first event
            self._member_origin = time.time() - clock()
        return writer

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        metrics = {k: v for k, v in metrics.items() if k != "epoch"}
        if member_of_this_thread() is None:
            return super().log_metrics(metrics, step)
        # A fused member's events are timed on its own clock (execution/fused.py clock), from when its writer
        # wrote its first event: the report's seconds axis is then the member's share of the group's time.
        writer = self.experiment
        for k, v in metrics.items():
            writer.add_scalar(k, v.item() if hasattr(v, "item") else v, step, walltime=self._member_origin + clock())

    @rank_zero_only
    def log_sample(self, tag: str, text: str, step: int) -> None:
        """A text sample in the Text tab, indented four spaces: TensorBoard renders markdown, and this keeps the
        text verbatim."""
        self.experiment.add_text(tag, "    " + text.replace("\n", "\n    "), step)
