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
