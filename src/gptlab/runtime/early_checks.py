"""Every refusal that depends only on the config and the machine, in one call that reads and writes no run dir.

The Hydra callback `run_dir_guard.GuardRunDir` calls it before Hydra creates the run dir, so a typo, a model that
cannot fit or an option this machine cannot run leaves the launch dir exactly as it was; `train()` calls it again
for callers without Hydra (tests, a sweep's in-process jobs), where it costs ~0.1 s with the bytes tokenizer.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from gptlab.checkpoint.reader import check_resumable
from gptlab.config.check import check
from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters
from gptlab.runs import sweep_jobs
from gptlab.runs.resume import given_checkpoint, resume_mode
from gptlab.runtime.checkpoint_plan import check_checkpoint_space
from gptlab.runtime.float8 import check_float8_here
from gptlab.runtime.guards import check_devices, check_memory, resolve_accelerator
from gptlab.runtime.option_relevance import ignored_options
from gptlab.runtime.preflight import checkpoint_bytes
from gptlab.runtime.strategies import check_optimizer_fits_strategy, uses_fsdp

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig) -> list[str]:
    """What the config alone can be refused for: the typed schemas' ranges and rules (gptlab.config), options that
    would have no effect (option_relevance: refused in a single run, a warning in a sweep job, where one value is
    shared by jobs it may not apply to), and an optimizer the strategy cannot run. Returns the warnings: the run
    logs them once its own log (train.log) is set up, not Hydra's launcher, whose lines carry a [HYDRA] tag."""
    check(cfg)
    warnings = ignored_options(cfg, sweep_jobs.in_sweep_job())
    strategy = cfg.trainer.get("strategy") if "trainer" in cfg else None
    check_optimizer_fits_strategy((cfg.get("optimizer") or {}).get("_target_"),
                                  strategy.get("_target_") if isinstance(strategy, DictConfig) else strategy)
    return warnings


@dataclass
class Checked:
    """What the checks built on the way, so `train()` does not build it twice."""
    tokenizer: Any
    model_cfg: GPTConfig
    warnings: list[str]  # options that will have no effect (option_relevance), for the run's log


def is_launcher() -> bool:
    """Whether this process starts the job's other ranks (Lightning started the others with LOCAL_RANK set, and
    they were checked by this one)."""
    return int(os.environ.get("LOCAL_RANK", "0")) == 0


def build_model_config(model_cfg: Any, vocab_size: int) -> GPTConfig:
    """The preset, with vocab_size taken from the tokenizer when the preset leaves it null."""
    values = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) else model_cfg
    return GPTConfig.for_tokenizer(values, vocab_size)


def check_attention_runs_here(model_cfg: GPTConfig, trainer_cfg: Any) -> None:
    """model.attn_impl=flex is refused by the attention kernel at the first forward; say it before anything runs.
    Only local and strided layers use the choice (dense layers always take the dense kernel)."""
    sparse = any(kind != "dense" and not (kind == "local" and model_cfg.attn_window >= model_cfg.block_size)
                 for kind in model_cfg.attn_pattern)
    if model_cfg.attn_impl == "flash" and sparse:
        _check_flash_runs_here(model_cfg, trainer_cfg)
    if model_cfg.attn_impl != "flex" or not sparse:
        return
    if model_cfg.dropout > 0:
        raise ConfigError(f"model.attn_impl=flex has no attention dropout (model.dropout={model_cfg.dropout}); "
                          "set model.dropout=0.0 or use model.attn_impl=auto or chunked.")
    if resolve_accelerator(trainer_cfg.get("accelerator", "auto")) == "cpu":
        raise ConfigError("model.attn_impl=flex cannot train on CPU (FlexAttention has no CPU backward) and this run "
                          f"trains on the CPU (trainer.accelerator={trainer_cfg.get('accelerator', 'auto')}); use "
                          "model.attn_impl=auto or chunked.")
    from gptlab.model.sparse_attention import flex_available

    if not flex_available():
        raise ConfigError("model.attn_impl=flex needs torch.nn.attention.flex_attention, which this torch lacks; "
                          "use model.attn_impl=auto or chunked, or torch>=2.5.")


def _check_flash_runs_here(model_cfg: GPTConfig, trainer_cfg: Any) -> None:
    """model.attn_impl=flash: FlashAttention's window computes local layers on CUDA, with flash-attn installed."""
    from gptlab.model.sparse_attention import flash_available

    if "strided" in model_cfg.attn_pattern:
        raise ConfigError("model.attn_impl=flash computes local layers only and model.attn_pattern has strided ones; "
                          "use model.attn_impl=auto (flash for local layers where it can, chunked for strided).")
    if resolve_accelerator(trainer_cfg.get("accelerator", "auto")) == "cpu":
        raise ConfigError("model.attn_impl=flash needs a CUDA GPU (flash-attn has no CPU kernel) and this run trains "
                          f"on the CPU (trainer.accelerator={trainer_cfg.get('accelerator', 'auto')}); use "
                          "model.attn_impl=auto.")
    if not flash_available():
        raise ConfigError("model.attn_impl=flash needs the flash-attn package, which is not installed; "
                          "pip install flash-attn, or use model.attn_impl=auto.")


# Configs this process has already passed, by their text: the Hydra callback checks before the run dir exists and
# train() checks again (for callers without Hydra); the second time costs nothing and repeats no warning.
_PASSED: dict[str, Checked] = {}


def check_before_run(cfg: DictConfig) -> Checked:
    """Raises ConfigError for a config this machine would refuse at any later point; builds the tokenizer and the
    model config on the way (a missing tokenizer file is a refusal too)."""
    key = OmegaConf.to_yaml(cfg)
    if key not in _PASSED:
        _PASSED[key] = _check_before_run(cfg)
    return _PASSED[key]


def _check_before_run(cfg: DictConfig) -> Checked:
    warnings = check_config(cfg)  # types and ranges of every group: a second, before anything heavy
    resume_mode(cfg)  # a bad `resume` value or resume together with ckpt_path
    launcher = is_launcher()
    if launcher:
        check_devices(cfg.trainer)  # before Lightning spawns a process per device
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model_cfg = build_model_config(cfg.model, tokenizer.vocab_size)
    check_attention_runs_here(model_cfg, cfg.trainer)
    if Runtime(**cfg.get("runtime", {})).float8:
        check_float8_here(resolve_accelerator(cfg.trainer.get("accelerator", "auto")))
    if launcher and cfg.get("check_memory", True):  # other ranks would see rank 0's memory already taken
        check_memory(model_cfg, cfg.data.batch_size, cfg.trainer,  # before the model's tensors are allocated
                     runtime=Runtime(**cfg.get("runtime", {})))
    ckpt_path = given_checkpoint(cfg)  # a file outside the run dir, so it is checked here too
    if ckpt_path is not None:
        check_resumable(ckpt_path, model_cfg, uses_fsdp(cfg.trainer))
    if launcher and not cfg.trainer.get("fast_dev_run"):  # a smoke test saves no checkpoint
        check_checkpoint_space(cfg.get("callbacks"), checkpoint_bytes(count_parameters(model_cfg)["total"]),
                               (cfg.get("paths") or {}).get("log_dir"))
    return Checked(tokenizer, model_cfg, warnings)
