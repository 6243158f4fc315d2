"""Hydra callbacks: a sweep says where it writes, when it starts and when it ends.

`scripts/ablation_report.py` takes the sweep dir as its argument; without this the user has to dig it out of
outputs/multiruns/<name>/<date>/<time>.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class AnnounceSweepDir(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"gptlab: sweep dir {config.hydra.sweep.dir}", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"gptlab: sweep finished; its runs are in {config.hydra.sweep.dir} "
              f"(report: python scripts/ablation_report.py {config.hydra.sweep.dir})", flush=True)
