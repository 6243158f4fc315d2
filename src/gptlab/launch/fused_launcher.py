"""hydra/launcher=fused: a `-m` sweep whose jobs of one model shape train as fused groups of up to `max_members`
members in this process (gptlab.launch.fused_groups decides the groups, gptlab.execution.fused runs their steps).

Each member is the same sweep job Hydra's basic launcher would run, in a thread of its own: Hydra's run_job writes
its dir and .hydra/, gptlab's train() checks it, skips it when an earlier launch finished it, builds its own
Trainer, callbacks, loggers and checkpoints, and records its failure in its own dir. Why threads of whole runs
rather than one hand-written loop over k models: every member then is its own run by construction (the same
Lightning loop, checkpoints that eval.py, sample.py and resume read as any other, the same sweep records), and the
only new code is the fused forward and backward. One member runs at a time, each with its own random streams
(execution/fused.py FusedGroup: Hydra's config singleton and torch's RNG are process-wide); they meet at each fused
step. A preemption signal is acted on by every member (each saves its own last.ckpt), and a relaunch continues each
from it, or skips it when finished. Before any member starts, each group's memory is compared with the device's
(fused_groups.check_group_memory). Groups run one after another.
"""

from __future__ import annotations

import logging
import logging.config
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from gptlab.errors import ConfigError, PreemptedError, StoppedBySignal
from gptlab.execution.fused import FusedGroup
from gptlab.launch.continuing import sweep_resume_command
from gptlab.launch.fused_groups import check_group_memory, describe, plan_groups
from gptlab.signals import FLAG

log = logging.getLogger(__name__)


class FusedLauncher(Launcher):
    def __init__(self, max_members: int = 8) -> None:
        self.max_members = max_members
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        console_logging(self.config)
        configs = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = cfg.hydra.job.num = idx
            configs.append(cfg)
        try:
            groups, differ = plan_groups(configs, self.max_members)
            for group in groups:
                check_group_memory([configs[i] for i in group])
        except ConfigError as err:
            print(f"gptlab: error: {err}", file=sys.stderr)
            sys.exit(2)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        for line in describe(groups, differ, configs, self.max_members):
            print(line, flush=True)
        results: dict[int, JobReturn] = {}
        for n, group in enumerate(groups, start=1):
            started = time.perf_counter()
            results.update(self.run_group([configs[i] for i in group]))
            print(f"gptlab: fused: group {n} ran in {time.perf_counter() - started:.1f} s; each member's fit_seconds "
                  "and tokens/s count its share of that time (docs/run-outputs.md)", flush=True)
        return [results[i] for i in sorted(results)]

    def run_group(self, members: list[DictConfig]) -> dict[int, JobReturn]:
        """Every member's job in a thread of its own, all joined; an exit a member's entry asked for (a refusal:
        exit 2) is taken once every member has ended."""
        group = FusedGroup(len(members), carried=[(lambda: HydraConfig.instance().cfg, _set_hydra_config)])
        results: dict[int, JobReturn] = {}
        exits: list[BaseException] = []
        saved = HydraConfig.instance().cfg

        ended = [threading.Event() for _ in members]  # waited on instead of join(): see stop_members

        def member(position: int, cfg: DictConfig) -> None:
            with group.member(position), member_log_file(cfg):
                try:
                    results[int(cfg.hydra.job.num)] = run_job(
                        hydra_context=self.hydra_context, task_function=self.task_function, config=cfg,
                        job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir", configure_logging=False)
                except BaseException as err:  # SystemExit of a refusal, already said by the entry point
                    exits.append(err)
                finally:
                    ended[position].set()

        threads = [threading.Thread(target=member, args=(i, cfg), name=f"fused-job-{cfg.hydra.job.num}")
                   for i, cfg in enumerate(members)]
        with FLAG.shared():  # a preemption signal is for every member: each saves its last.ckpt and stops
            try:
                for thread in threads:
                    thread.start()
                for event in ended:
                    event.wait()
            except KeyboardInterrupt:
                stop_members(ended, exits, self.config)
            for thread in threads:
                thread.join()
        HydraConfig.instance().cfg = saved
        for err in exits:
            raise err
        return results


def stop_members(ended: list[threading.Event], exits: list[BaseException], launcher_cfg: Any) -> None:
    """Ctrl-C reaches the main thread only, which waits for the members: each member is told as a preemption is
    (the flag), so each saves its last.ckpt at its next step and stops, and this thread says so once, with the
    sweep's continue-line (each member's entry keeps quiet on a Ctrl-C: gptlab.launch.cli). A second Ctrl-C stops
    at once (a checkpoint being written is left as its temp file, which the next write of it removes). The wait is
    on events, not Thread.join: a join that a KeyboardInterrupt cut marks its thread as ended while it still runs
    (CPython < 3.13), so every later join returned at once and the process aborted with the members running."""
    FLAG.signum = signal.SIGINT
    try:
        for event in ended:
            event.wait()
    except KeyboardInterrupt:
        os.write(2, b"gptlab: interrupted again (Ctrl-C): stopped at once, the members' saves unfinished.\n")
        os._exit(130)
    stops = [err.__context__ for err in exits if isinstance(err.__context__, (PreemptedError, StoppedBySignal))]
    saved = sorted({str(err.step) for err in stops if isinstance(err, PreemptedError)})
    done = f"each member saved its last.ckpt at its next step (step{'s' * (len(saved) > 1)} {', '.join(saved)})" \
        if saved else \
        "no member had started training"
    HydraConfig.instance().set_config(launcher_cfg)  # the sweep's, whose dir the continue-line names
    print(f"gptlab: interrupted (Ctrl-C): {done}. Continue the sweep with: {sweep_resume_command()}",
          file=sys.stderr, flush=True)
    exits[:] = [SystemExit(130)]


def _set_hydra_config(cfg: Optional[DictConfig]) -> None:
    HydraConfig.instance().cfg = cfg  # as run_job restores it: the member's own job config


def console_logging(config: DictConfig) -> None:
    """The jobs' logging config without its file handler: each member's file is its own (member_log_file)."""
    job_logging = OmegaConf.to_container(config.hydra.job_logging, resolve=False)
    if not isinstance(job_logging, dict) or not job_logging:
        return
    job_logging.get("handlers", {}).pop("file", None)
    root = job_logging.get("root", {})
    root["handlers"] = [h for h in root.get("handlers", []) if h != "file"]
    logging.config.dictConfig(job_logging)


class member_log_file:
    """<job dir>/<job name>.log with the records of this member's thread, as Hydra writes a job's log."""

    def __init__(self, cfg: DictConfig) -> None:
        self.path = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir) / f"{cfg.hydra.job.name}.log"
        self.handler: Optional[logging.Handler] = None

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        thread = threading.get_ident()
        self.handler = logging.FileHandler(self.path)
        self.handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        self.handler.addFilter(lambda record: record.thread == thread)
        logging.getLogger().addHandler(self.handler)

    def __exit__(self, *exc: Any) -> None:
        assert self.handler is not None
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()
