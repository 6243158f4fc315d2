"""`gptlab.config.main`: `hydra.main` whose compose errors are one `gptlab: error:` line and exit 2.

Hydra composes before the task function runs, so gptlab.launch.cli.user_errors_exit never sees a misspelt key or a
wrong type: Hydra prints its own multi-line report (or a traceback) and exits 1. Hydra re-raises instead when
HYDRA_FULL_ERROR is set (hydra/_internal/utils.py run_and_report), which is the one public switch; `main` sets
it for the call and words the exceptions raised before the task started. Exceptions from the task itself pass
through as they came (user_errors_exit has already handled a user's mistake there).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Optional

import hydra

from gptlab.config.suggest import compose_message


def main(config_name: str, config_path: str = "../conf") -> Callable[[Callable[..., Any]], Callable[[], Any]]:
    """Use as `@hydra.main(version_base="1.3", config_path=..., config_name=...)` is used."""

    def decorate(task: Callable[..., Any]) -> Callable[[], Any]:
        started = False

        @functools.wraps(task)
        def marked(*args: Any, **kwargs: Any) -> Any:
            nonlocal started
            started = True
            return task(*args, **kwargs)

        hydra_main = hydra.main(version_base="1.3", config_path=config_path, config_name=config_name)(marked)

        @functools.wraps(task)
        def run() -> Any:
            if _multirun_shown(sys.argv[1:]):
                return _show_each_job(run, sys.argv)
            previous = os.environ.get("HYDRA_FULL_ERROR")
            os.environ["HYDRA_FULL_ERROR"] = "1"
            try:
                return hydra_main()
            except Exception as err:
                if not started:
                    exit_if_compose_error(err)
                raise
            finally:
                restore("HYDRA_FULL_ERROR", previous)

        return run

    return decorate


MULTIRUN_FLAGS = ("-m", "--multirun")
SHOW_FLAGS = ("-c", "--cfg", "--info", "-i")


def _multirun_shown(args: list[str]) -> bool:
    """`-m --cfg job` (or --info): what a sweep's jobs would get. Hydra allows only one of --multirun, --cfg and
    --info, so it is shown job by job instead, as single runs with each job's overrides."""
    return any(a in MULTIRUN_FLAGS for a in args) and any(a in SHOW_FLAGS or a.startswith("--cfg=") for a in args)


def _show_each_job(run: Callable[[], Any], argv: list[str]) -> None:
    """Each job of the sweep `argv` describes, shown by `run` with that job's overrides (the sweep's own syntax,
    a=1,2 or range(...), expanded by Hydra's basic sweeper as -m would)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [a for a in argv[1:] if a not in MULTIRUN_FLAGS]
    flags, overrides, i = [], [], 0
    while i < len(args):  # --cfg job / -c job / -p package take a value; --info may take one (a word, no `=`)
        takes = args[i] in ("-c", "--cfg", "-p", "--package", "--info", "-i") and i + 1 < len(args) \
            and "=" not in args[i + 1] and not args[i + 1].startswith("-")
        flags += args[i:i + 1 + takes] if args[i].startswith("-") else []
        overrides += [] if args[i].startswith("-") else [args[i]]
        i += 1 + takes
    try:
        jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)[0]
    except Exception as err:
        exit_if_compose_error(err)
        raise
    for number, job in enumerate(jobs):
        print(f"# job {number}: {' '.join(job) or '(no overrides)'}", flush=True)
        GlobalHydra.instance().clear()
        sys.argv = [argv[0], *flags, *job]
        try:
            run()
        finally:
            sys.argv = argv


def exit_if_compose_error(err: BaseException) -> None:
    """Print gptlab's line for a compose error and exit 2; return for any other exception."""
    message = compose_message(err)
    if message is not None:
        print(f"gptlab: error: {message}", file=sys.stderr)
        sys.exit(2)


def restore(name: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
