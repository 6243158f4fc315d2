"""Override values compared as Hydra reads them, not as they were spelt: `false` and `False` are one bool, `1e-3`
and `0.001` one float. A report matches `--baseline` and the sweep's own values through here, so any spelling
the sweep's command line accepted selects the same jobs."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

_PARSER = OverridesParser.create()


def typed(key: str, text: str) -> Any:
    """`text` as Hydra's override grammar types it (bool, int, float, str, list, dict, None); raises ValueError
    when the grammar refuses it."""
    try:
        override = _PARSER.parse_overrides([f"{key}={text}"])[0]
    except HydraException as err:
        raise ValueError(str(err).splitlines()[0]) from None
    if override.is_sweep_override():
        raise ValueError(f"{key}={text} is a sweep (several values), not one value")
    return override.value()


def launched_values(line: str) -> tuple[str, list[str] | None]:
    """The key of an override line as a job's overrides spell it (`+rung`, prefix kept) and the values the sweeper
    gives it, spelt as in those overrides (`model.norm=pre,post`: pre, post; `seed=range(1,3)`: 1, 2; a single
    value: itself); None for an interval (an Optuna search space), whose values cannot be listed."""
    override = _PARSER.parse_overrides([line])[0]
    if not override.is_sweep_override():
        return override.get_key_element(), [override.get_value_element_as_str()]
    if not override.is_discrete_sweep():
        return override.get_key_element(), None
    return override.get_key_element(), list(override.sweep_string_iterator())


def same(a: Any, b: Any) -> bool:
    """Equal as typed values, a bool only equal to a bool (Python's True == 1 is not Hydra's)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def same_text(key: str, a: str, b: str) -> bool:
    """Two spellings of one override's value: equal as Hydra types them, or as text when either does not parse."""
    if a == b:
        return True
    try:
        return same(typed(key, a), typed(key, b))
    except ValueError:
        return False
