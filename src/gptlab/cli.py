"""What every entry script shares: a user's mistake is a message and exit code 2, not a traceback."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Optional, TypeVar

from gptlab.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


def _config_error(err: BaseException) -> Optional[ConfigError]:
    """The ConfigError behind `err`: Hydra's instantiate wraps what a constructor raises."""
    while err is not None:
        if isinstance(err, ConfigError):
            return err
        err = err.__cause__
    return None


def user_errors_exit(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            user_error = _config_error(err)
            if user_error is None:
                raise
            print(f"gptlab: error: {user_error}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
