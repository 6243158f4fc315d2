"""`${gptlab.output_dir:}`, the value of paths.output_dir: the job's run dir. Hydra sets hydra.runtime.output_dir only
when it runs a job, so `--cfg job --resolve` (how Hydra users read a resolved config) found None there and
paths.output_dir was refused as invalid. Without a job it is the dir a run would get, hydra.run.dir."""

from __future__ import annotations

from omegaconf import OmegaConf

RESOLVER = "gptlab.output_dir"


def output_dir() -> str:
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()  # outside a Hydra app: Hydra's own "HydraConfig was not set", as ${hydra:...} says
    return OmegaConf.select(hydra, "runtime.output_dir", default=None) or hydra.run.dir


def register() -> None:
    OmegaConf.register_new_resolver(RESOLVER, output_dir, replace=True)
