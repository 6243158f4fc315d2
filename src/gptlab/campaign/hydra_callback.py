"""`python src/train.py -m campaign=NAME ...`: the sweep is recorded in campaign NAME's ledger when it ends, and what
is ready is tested, as `scripts/campaign.py add NAME <sweep dir>` does. The campaign must exist (its ledger is in
paths.tracking_uri, the store logger=mlflow writes to); one that does not, or a run that is not a `-m` sweep, is
refused before anything is written or trained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from gptlab.errors import ConfigError
from gptlab.launch.cli import refuse


class RecordInCampaign(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        name = config.get("campaign")
        if name:
            refuse(ConfigError(
                f"campaign={name}: a campaign records sweeps over seeds (a verdict needs several seeds per arm); "
                f"launch one with -m: python src/train.py -m campaign={name} seed=1,2,3 <overrides>"))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        name = config.get("campaign")
        if not name:
            return
        from gptlab.campaign import ledger

        try:
            ledger.load(config.paths.tracking_uri, str(name))
        except ConfigError as err:
            refuse(err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Before the sweep's own end line (conf/train.yaml lists this callback first), so that the jobs that
        finished are recorded also when others failed."""
        name = config.get("campaign")
        if not name:
            return
        from gptlab.campaign import actions, view

        try:
            campaign = actions.add(config.paths.tracking_uri, str(name), Path(config.hydra.sweep.dir))
        except ConfigError as err:
            refuse(err)
        print(f"gptlab: the sweep is recorded in campaign {name} ({config.paths.tracking_uri}):\n"
              f"{view.markdown(campaign)}", flush=True)
