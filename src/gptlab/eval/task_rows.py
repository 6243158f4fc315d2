"""A zero-shot task's row checked before it is scored: a row that does not say what it asks (a HellaSwag label
outside its endings, a null field, one ending) would otherwise be scored as a wrong answer and lower the accuracy
in silence. Each check names the field; tasks.task_examples adds the file and row."""

from __future__ import annotations

from typing import Any

from gptlab.errors import ConfigError


def _text(row: dict[str, Any], field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str):
        raise ConfigError(f"field {field!r} is {value!r}; it must be a string")
    return value


def check_lambada(row: dict[str, Any]) -> None:
    text = _text(row, "text").strip()
    if " " not in text:
        raise ConfigError(f"field 'text' is {text!r}; it must be a passage whose last word is the target")


def check_hellaswag(row: dict[str, Any]) -> None:
    endings = row.get("endings")
    if not isinstance(endings, list) or len(endings) < 2 or not all(isinstance(e, str) and e.strip() for e in endings):
        raise ConfigError(f"field 'endings' is {endings!r}; it must be a list of at least 2 non-empty strings")
    label = row.get("label")
    # The Hub's rows store the label as a string ("3"); a bool or float is not an index.
    index = label if isinstance(label, int) and not isinstance(label, bool) else None
    if isinstance(label, str) and label.strip().isdecimal():  # isdigit() would pass '²', which int() refuses
        index = int(label)
    if index is None or not 0 <= index < len(endings):
        raise ConfigError(f"field 'label' is {label!r}; it must be the index of the right ending, "
                          f"0 to {len(endings) - 1} for this row's {len(endings)} endings")
    if row.get("ctx_a") is not None or row.get("ctx_b") is not None:
        _text(row, "ctx_a"), _text(row, "ctx_b")
    else:
        _text(row, "ctx")
    if row.get("activity_label") is not None:
        _text(row, "activity_label")


CHECKS = {"lambada": check_lambada, "hellaswag": check_hellaswag}
