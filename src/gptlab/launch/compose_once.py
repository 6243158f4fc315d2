"""Each sweep job's config composed once: Hydra's basic sweeper composes every job of a batch to check it before
launching (`Sweeper.validate_batch_is_legal`), and the launcher then composes each again to run it: about 0.1 s of
CPU a job (docs/benchmarks.md) for a config that is the same both times (issue 55: a sweep job's fixed cost).

`BasicSweeper` is Hydra's, with its launcher's config loader wrapped: the config the check composed for a job is
handed, once, to the launcher's compose of the same job. The check still runs first, so a batch with a job that cannot
be composed still fails before any job starts. A launcher that composes in another process (submitit's, Ray's) gets
the config composed here, as it did before. Other sweepers (Optuna's) are left as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper as HydraBasicSweeper
from hydra.core.config_loader import ConfigLoader
from hydra.types import HydraContext, RunMode, TaskFunction
from omegaconf import DictConfig


class ComposedOnce(ConfigLoader):
    """`loader`, whose `load_sweep_config` returns the config it composed for the same job's overrides the time
    before (once), else composes it; every other call goes to `loader` as it is."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self.composed: dict[tuple[str, ...], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = tuple(sweep_overrides)
        if key in self.composed:  # the launcher's compose of a job the check composed: nothing else used that copy
            return self.composed.pop(key)
        self.composed[key] = self.loader.load_sweep_config(master_config, sweep_overrides)
        return self.composed[key]

    def load_configuration(self, config_name: Optional[str], overrides: list[str], run_mode: RunMode,
                           from_shell: bool = True, validate_sweep_overrides: bool = True) -> DictConfig:
        return self.loader.load_configuration(config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

    def get_search_path(self) -> Any:
        return self.loader.get_search_path()

    def get_sources(self) -> Any:
        return self.loader.get_sources()

    def list_groups(self, parent_name: str) -> list[str]:
        return self.loader.list_groups(parent_name)

    def get_group_options(self, group_name: str, results_filter: Any = None, config_name: Optional[str] = None,
                          overrides: Optional[list[str]] = None) -> list[str]:
        return self.loader.get_group_options(group_name, results_filter, config_name, overrides)

    def compute_defaults_list(self, config_name: Optional[str], overrides: list[str], run_mode: RunMode) -> Any:
        return self.loader.compute_defaults_list(config_name, overrides, run_mode)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for another process (Ray's workers), without the configs: a worker composes its own job."""
        return {"loader": self.loader, "composed": {}}

    def __getattr__(self, name: str) -> Any:  # what Hydra's own loader has beyond the interface (its repository)
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


class BasicSweeper(HydraBasicSweeper):
    """Hydra's basic sweeper (the same config: max_batch_size, params), whose check and launcher share each job's
    compose."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        shared = dataclasses.replace(hydra_context, config_loader=ComposedOnce(hydra_context.config_loader))
        super().setup(hydra_context=shared, task_function=task_function, config=config)
