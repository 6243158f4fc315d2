"""Lightning's TensorBoardLogger without the `epoch` scalar.

Lightning adds `epoch` to every logged dict; gptlab's epochs are pseudo-epochs of a sampler, meaningless to a
reader of a run counted in optimizer steps, and their chart sorted first on TensorBoard's opening screen.
"""

from __future__ import annotations

from typing import Mapping, Optional

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


class RunTensorBoardLogger(TensorBoardLogger):
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        super().log_metrics({k: v for k, v in metrics.items() if k != "epoch"}, step)
