"""Hydra callbacks: a sweep says where it writes, when it starts and when it ends; an unwritable run or sweep dir
is a one-line error before Hydra's own mkdir raises a traceback.

`scripts/ablation_report.py` takes the sweep dir as its argument; without the announcement the user has to dig
it out of outputs/multiruns/<name>/<date>/<time>.
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from gptlab.errors import ConfigError


class AnnounceSweepDir(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"gptlab: sweep dir {config.hydra.sweep.dir}", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"gptlab: sweep finished; its runs are in {config.hydra.sweep.dir} "
              f"(report: python scripts/ablation_report.py {config.hydra.sweep.dir})", flush=True)


class CheckOutputDir(Callback):
    """Runs before Hydra creates hydra.run.dir (or hydra.sweep.dir) and exits 2 with gptlab's message."""

    @staticmethod
    def _check(field: str, value: str) -> None:
        from gptlab.train.config_check import writable_dir

        try:
            writable_dir(field, value)
        except ConfigError as err:
            print(f"gptlab: error: {err}", file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check("hydra.sweep.dir", config.hydra.sweep.dir)
