"""Every refusal that depends only on the config and the machine, in one call that reads and writes no run dir.

The Hydra callback `run_dir_guard.GuardRunDir` calls it before Hydra creates the run dir, so a typo, a model that
cannot fit or an option this machine cannot run leaves the launch dir exactly as it was; `train()` calls it again
for callers without Hydra (tests, a sweep's in-process jobs), where it costs ~0.1 s with the bytes tokenizer.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Optional

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from gptlab.checkpoint.reader import check_resumable
from gptlab.config.budget import Budget
from gptlab.config.schemas import Runtime
from gptlab.config.validate import Decided, check, check_target, check_targets, plain
from gptlab.data import mixture
from gptlab.errors import find_config_error
from gptlab.execution.float8 import check_float8_here
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters
from gptlab.model.sparse_attention import computes_densely, refuse_flash, refuse_flex
from gptlab.preflight.batch_fit import Batching
from gptlab.preflight.checkpoint_plan import check_checkpoint_space
from gptlab.preflight.guards import check_devices, check_memory, resolve_accelerator
from gptlab.preflight.option_relevance import ignored_options
from gptlab.preflight.output_dirs import checkpoint_bytes
from gptlab.runs import sweep_jobs
from gptlab.runs.resume import given_checkpoint

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig) -> list[str]:
    """What the config alone can be refused for: the typed schemas' ranges and rules (gptlab.config), and options
    that would have no effect (option_relevance: refused in a single run, a warning in a sweep job, where one value is
    shared by jobs it may not apply to). Returns the warnings: the run logs them once its own log (train.log) is set
    up, not Hydra's launcher, whose lines carry a [HYDRA] tag."""
    return _config_pass(cfg)[1]


def _config_pass(cfg: DictConfig, before_targets=None, targets: bool = True) -> tuple[Decided, list[str]]:
    """check_config, with what the config decides (gptlab.config.validate.Decided) for the plan; `before_targets`
    runs before the _target_ lookups (which import their modules; `targets=False` leaves them out)."""
    decided = check(cfg, before_targets=before_targets, targets=targets)
    return decided, ignored_options(cfg, sweep_jobs.in_sweep_job())


@dataclass(frozen=True)
class Checked:
    """The plan the one preflight pass hands to the builders: what it computed on the way, each value once."""
    tokenizer: Any
    model_cfg: GPTConfig
    warnings: list[str]  # options that will have no effect (option_relevance), for the run's log
    runtime: Runtime  # how the model runs (compile, checkpointing, attention kernel, float8)
    fsdp: bool  # trainer=fsdp: sharded checkpoints
    parameters: int  # the model's parameter count (count_parameters' total)
    given: Optional[str]  # the checkpoint ckpt_path names, checked against model_cfg (None: no ckpt_path)
    bound: Optional[Budget] = None  # the budget= that set trainer.max_steps (gptlab.config.budget)
    max_steps: Optional[int] = None  # the steps it set


def is_launcher() -> bool:
    """Whether this process starts the job's other ranks (Lightning started the others with LOCAL_RANK set, and
    they were checked by this one)."""
    return int(os.environ.get("LOCAL_RANK", "0")) == 0


def build_model_config(model_cfg: Any, vocab_size: int) -> GPTConfig:
    """The preset, with vocab_size taken from the tokenizer when the preset leaves it null."""
    values = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) else model_cfg
    return GPTConfig.for_tokenizer(values, vocab_size)


def check_attention_runs_here(model_cfg: GPTConfig, trainer_cfg: Any) -> None:
    """model.attn_impl=flex or flash is refused by the attention kernel at the first forward; say it before anything
    runs. Only sparse layers use the choice (dense layers always take the dense kernel)."""
    if not any(not computes_densely(kind, model_cfg.block_size, model_cfg.attn_window)
               for kind in model_cfg.attn_pattern):
        return
    accelerator = trainer_cfg.get("accelerator", "auto")
    on_cpu = resolve_accelerator(accelerator) == "cpu"
    if model_cfg.attn_impl == "flash":
        refuse_flash("strided" in model_cfg.attn_pattern, on_cpu, accelerator)
    if model_cfg.attn_impl == "flex":
        refuse_flex(model_cfg.dropout, on_cpu, accelerator)


def batching(cfg: DictConfig, model_cfg: GPTConfig, tokenizer: Any) -> Batching:
    """The run's step and corpus, which bound the micro-batch a memory refusal suggests."""
    trainer = cfg.trainer
    devices = trainer.get("devices", 1)
    return Batching(
        block_size=model_cfg.block_size,
        ranks=(1 if devices == "auto" else int(devices)) * int(trainer.get("num_nodes", 1)),
        accumulate=int(trainer.get("accumulate_grad_batches", 1) or 1),
        global_batch_tokens=cfg.get("global_batch_tokens"),
        samples_per_epoch_lengthens=cfg.data.get("sampling", "random") == "random" or OmegaConf.select(
            cfg.data, "source._target_") == mixture.TARGET,
        epoch_windows=lambda: epoch_windows(cfg.data, tokenizer),
    )


def epoch_windows(data: DictConfig, tokenizer: Any) -> Optional[int]:
    """The training windows of one epoch of the run's corpus, where its store can tell before training (None: a
    stream, which repeats without end, so any batch fills it; shards not prepared yet). A data node that does not
    build is refused when the run builds it, in gptlab.apps.build's words; here it only leaves the corpus unknown."""
    try:
        module = hydra.utils.instantiate(data, tokenizer=tokenizer)
    except Exception as err:
        found = find_config_error(err)
        if found is not None:
            raise found from err
        return None
    return module.store.known_epoch_windows()


# Configs this process has already passed, by their text: the Hydra callback checks before the run dir exists and
# train() checks again (for callers without Hydra); the second time costs nothing and repeats no warning. _TRAINS:
# those whose check_to_train part passed too.
_PASSED: dict[str, Checked] = {}
_TRAINS: set[str] = set()


def check_before_run(cfg: DictConfig, trains: bool = True) -> Checked:
    """Raises ConfigError for a config this machine would refuse at any later point; builds the tokenizer and the
    model config on the way (a missing tokenizer file is a refusal too). `trains=False` leaves out what only a run
    that trains needs (check_to_train), which imports Lightning: the run dir guard first answers a run that is
    finished, and calls this again with `trains=True` for one that will train."""
    key = OmegaConf.to_yaml(cfg)
    if key not in _PASSED:
        _PASSED[key] = _check_before_run(cfg, trains)
        if trains:
            _TRAINS.add(key)
    checked = _PASSED[key]
    if checked.bound is not None:  # the steps the budget set (config.validate), on this copy of the config too
        with open_dict(cfg):
            cfg.trainer.max_steps = checked.max_steps
    if trains and key not in _TRAINS:
        check_to_train(cfg, checked)
        _TRAINS.add(key)
    return checked


def check_to_train(cfg: DictConfig, checked: Checked) -> None:
    """What only a run that trains needs, each of which imports Lightning (seconds): every _target_ imports (the
    Trainer's, the data module's, the callbacks'), and the disk holds the checkpoints its callbacks keep."""
    check_targets(cfg)
    check_space(cfg, checked.parameters)


def check_space(cfg: DictConfig, parameters: int) -> None:
    """The disk holds the checkpoints the callbacks keep (reading which of them save imports Lightning)."""
    if is_launcher() and not cfg.trainer.get("fast_dev_run"):  # a smoke test saves no checkpoint
        check_checkpoint_space(cfg.get("callbacks"), checkpoint_bytes(parameters),
                               (cfg.get("paths") or {}).get("log_dir"))


def _check_before_run(cfg: DictConfig, trains: bool = True) -> Checked:
    # types and ranges of every group, then the devices: seconds before Lightning would be imported to look up the
    # _target_ paths (the Trainer's, the data module's), which come next (or, without `trains`, not at all)
    launcher = is_launcher()
    # the devices before Lightning spawns a process per device (and before the _target_ lookups import it)
    decided, warnings = _config_pass(cfg, (lambda: check_devices(cfg.trainer)) if launcher else None, targets=trains)
    if not trains and "_target_" in cfg.tokenizer:  # built next, so looked up here in any case
        check_target("tokenizer._target_", plain(cfg.tokenizer._target_))
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model_cfg = build_model_config(cfg.model, tokenizer.vocab_size)
    check_attention_runs_here(model_cfg, cfg.trainer)
    if decided.runtime.float8:
        check_float8_here(resolve_accelerator(cfg.trainer.get("accelerator", "auto")))
    parameters = count_parameters(model_cfg)["total"]
    if launcher and cfg.get("check_memory", True):  # other ranks would see rank 0's memory already taken
        check_memory(model_cfg, cfg.data.batch_size, cfg.trainer,  # before the model's tensors are allocated
                     runtime=decided.runtime, parameters=parameters, batching=batching(cfg, model_cfg, tokenizer))
    given = given_checkpoint(cfg.get("ckpt_path"))  # a file outside the run dir, so it is checked here too
    if given is not None:
        check_resumable(given, model_cfg, decided.fsdp, cfg.optimizer.get("_target_"))
    if trains:
        check_space(cfg, parameters)
    return Checked(tokenizer, model_cfg, warnings, decided.runtime, decided.fsdp, parameters, given, decided.bound,
                   cfg.trainer.max_steps)
