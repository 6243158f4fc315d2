"""Hydra callbacks: a sweep says where it writes, when it starts and when it ends, and names each job by the
overrides that differ between jobs; an unwritable run or sweep dir is a one-line error before Hydra's own mkdir
raises a traceback.

`scripts/ablation_report.py` takes the sweep dir as its argument; without the announcement the user has to dig
it out of outputs/multiruns/<name>/<date>/<time>.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from gptlab.errors import ConfigError
from gptlab.launch.cli import refuse


class AnnounceSweepDir(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"gptlab: sweep dir {config.hydra.sweep.dir}", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Also names the jobs that failed (their failed.json) and then exits 1: every job has run by now."""
        from gptlab.runs.sweep_failures import EXIT_SOME_JOBS_FAILED, failure_report

        print(f"gptlab: sweep finished; its runs are in {config.hydra.sweep.dir} "
              f"(report: python scripts/ablation_report.py {config.hydra.sweep.dir})", flush=True)
        failures = failure_report(Path(config.hydra.sweep.dir))
        if failures is not None:
            print(failures, file=sys.stderr, flush=True)
            sys.exit(EXIT_SOME_JOBS_FAILED)


class CheckSweep(Callback):
    """A sweep whose jobs repeat a value (`seed=1,1`), one launched into a sweep dir that holds another sweep, or one
    whose GPU pool (hydra/launcher=local_gpus) does not fit its jobs: exit 2 before Hydra writes anything (the sweep
    dir, its sweep_config.json), so that the same launch with the way out is the same sweep, not another one."""

    @staticmethod
    def check(config: DictConfig) -> None:
        from gptlab.runs.sweep_identity import check_distinct_jobs, check_or_record_sweep

        launcher = config.hydra.get("launcher") or {}
        if str(launcher.get("_target_", "")).endswith(".LocalGPULauncher"):
            from gptlab.launch.gpu_launcher import device_pool  # submitit: imported only for its sweeps

            follows = OmegaConf.is_interpolation(launcher, "devices_per_job")  # trainer.devices, unless typed
            device_pool(launcher.get("device_ids"), launcher.get("devices_per_job"),
                        "trainer.devices" if follows else "hydra.launcher.devices_per_job")
        check_one_choice_per_group(config)
        check_distinct_jobs(config)
        check_or_record_sweep(config)  # last: it records a new sweep

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self.check(config)
        except ConfigError as err:
            refuse(err)


def check_one_choice_per_group(config: DictConfig) -> None:
    """A config group chosen twice with other options (`hydra/launcher=fused ... hydra/launcher=submitit_slurm`):
    Hydra silently takes the last, and the sweep runs under a launcher (a model, an optimizer) the user did not mean
    to keep; refused, naming both."""
    chosen: dict[str, str] = {}
    lines = [*config.hydra.overrides.hydra, *config.hydra.overrides.task]
    for override in OverridesParser.create().parse_overrides(lines):
        key = override.key_or_group
        if override.is_sweep_override() or override.is_delete() or not _is_group(key):
            continue
        value = override.get_value_element_as_str()
        if key in chosen and chosen[key] != value:
            raise ConfigError(f"{key} is chosen twice on the command line ({key}={chosen[key]}, then {key}={value}), "
                              f"and Hydra would silently keep only the last; give {key} once, e.g. {key}={value}.")
        chosen[key] = value


def _is_group(key: str) -> bool:
    """Whether `key` names a config group (hydra/launcher, model, optimizer ...), not a value."""
    if "/" in key:
        return True
    try:
        from hydra.core.global_hydra import GlobalHydra

        return bool(GlobalHydra.instance().config_loader().repository.group_exists(key))  # type: ignore[attr-defined]
    except Exception:  # another config loader than Hydra's own: only the slash-named groups are told apart
        return False


class NameSweepJobs(Callback):
    """Makes each job's `hydra.job.override_dirname` the overrides that differ between the jobs, e.g.
    `model.norm=post,seed=2` (train() names the job's TensorBoard run by it): the command line's fixed overrides
    (`experiment=ablate_norm`, `trainer.max_steps=100`) are added to its exclude_keys, leaving the swept ones and
    those a sweeper adds (an experiment's or Optuna's `hydra.sweeper.params`). Hydra composes every job's config
    from the master's `hydra.overrides.hydra` plus the job's own overrides, so the exclusion goes there."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        overrides = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        fixed = [o.key_or_group for o in overrides if not o.is_sweep_override()]
        excluded = [*config.hydra.job.config.override_dirname.exclude_keys, *fixed]
        if not fixed:
            return
        keys = ",".join(f"'{key}'" for key in excluded)
        with read_write(config.hydra.overrides):
            config.hydra.overrides.hydra.append(f"hydra.job.config.override_dirname.exclude_keys=[{keys}]")


class CheckOutputDir(Callback):
    """Runs before Hydra creates hydra.run.dir (or hydra.sweep.dir) and exits 2 with gptlab's message."""

    @staticmethod
    def _check(field: str, value: str) -> None:
        from gptlab.config.ranges import writable_dir

        try:
            writable_dir(field, value)
        except ConfigError as err:
            refuse(err)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from gptlab.runs.run_dir import note_origin, owns_run_dir

        self._check("hydra.run.dir", config.hydra.run.dir)
        if owns_run_dir():  # what the dir was, so a refusal after Hydra made it removes what Hydra made
            note_origin(Path(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check("hydra.sweep.dir", config.hydra.sweep.dir)


def missing_values(config: DictConfig) -> list[str]:
    """The task's `???` keys that the command line left unset (Hydra would raise MissingMandatoryValue on first
    read, after it has made the run dir). Read unresolved: interpolations of keys set later (eval's model.*) wait."""
    def walk(node: Any, prefix: str) -> list[str]:
        if isinstance(node, dict):
            return [k for key, value in node.items() for k in walk(value, f"{prefix}{key}.")]
        if isinstance(node, list):
            return [k for i, value in enumerate(node) for k in walk(value, f"{prefix}{i}.")]
        return [prefix[:-1]] if node == "???" else []

    task = OmegaConf.to_container(config, resolve=False)
    return sorted(walk({k: v for k, v in task.items() if k != "hydra"}, ""))


class CheckArguments(Callback):
    """The command's arguments, before Hydra creates or writes anything: a required one not given, or a `+key` that
    the entry point does not read (train's schema decides its own: gptlab.config.validate.check_appended). Either
    is one line naming it, and exit 2."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        missing = missing_values(config)
        if missing:
            refuse(missing_message(missing, config.hydra.job.config_name))
        name = config.hydra.job.config_name
        unread = None if name in TRAIN_CONFIGS else unread_appended(
            config, list(config.hydra.overrides.task), set(config.hydra.runtime.choices),
            lambda overrides: composed(name, overrides))
        if unread:
            refuse(unread)


# Configs that compose train.yaml and take train's command line: train's schema decides their appended keys
# (gptlab.config.validate), so a prepare_data.py command copied from a training command is not refused for +trainer.x.
TRAIN_CONFIGS = ("train", "prepare_data")


def composed(config_name: str, overrides: list[str]) -> Optional[DictConfig]:
    """The config the running entry point composes from `overrides` (Hydra's compose, in the Hydra that runs it);
    None where no Hydra is running."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        return None
    try:
        return compose(config_name=config_name, overrides=overrides)
    except Exception:
        return None


def unread_appended(config: DictConfig, overrides: list[str], groups: set[str],
                    compose_with: Optional[Callable[[list[str]], Optional[DictConfig]]] = None) -> Optional[str]:
    """Why a `+key=value` of the command line (`overrides`) is read by nothing (None: each is): a key the node does
    not have, unless the node calls a constructor that takes it (`+tokenizer.x=1`). `+group=option` adds one of the
    config's `groups`. A key the config has already (`+tokens=1e9` over `tokens: null`, which Hydra lets through)
    is refused as typed with a `+` it does not need: `compose_with` composes the command without that override."""
    from gptlab.config.suggest import already_a_key, unknown_key
    from gptlab.config.targets import target_parameters

    parsed = OverridesParser.create().parse_overrides(overrides)
    for index, override in enumerate(parsed):
        key = override.key_or_group
        if not override.is_add() or key in groups:
            continue
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(config, parent_key) if parent_key else config
        if not isinstance(parent, DictConfig):
            continue  # Hydra refused to add under a value already
        target = parent.get("_target_")
        params = target_parameters(parent) if target else set()
        if target and (params is None or leaf in params):
            continue
        without = compose_with([o for i, o in enumerate(overrides) if i != index]) if compose_with else None
        if without is not None and OmegaConf.select(without, key, default=_ABSENT, throw_on_missing=False) \
                is not _ABSENT:
            return already_a_key(key, override.input_line or key)
        known = [k for k in parent.keys() if k != leaf]
        return unknown_key(key, known, target=target, candidates=params or ())
    return None


_ABSENT = object()


def missing_message(missing: list[str], config_name: str) -> str:
    script = Path(sys.argv[0]).as_posix()
    given = " ".join(f"{key}=<value>" for key in missing)
    verb = "is" if len(missing) == 1 else "are"
    return (f"{', '.join(missing)} {verb} not set; pass {given} (python {script} {given}; what each takes: "
            f"conf/{config_name}.yaml).")
