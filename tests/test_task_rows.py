"""A zero-shot task row that does not say what it asks is refused naming the file, the row and the field, instead of
being scored as a wrong answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptlab.errors import ConfigError
from gptlab.eval.tasks import task_examples

GOOD = {"activity_label": "Baking", "ctx_a": "She mixes the flour.", "ctx_b": "then",
        "endings": [" she eats it.", " she bakes it.", " she sings.", " she sleeps."], "label": "1"}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(("change", "field", "why"), [
    ({"label": "4"}, "label", "0 to 3 for this row's 4 endings"),
    ({"label": -1}, "label", "0 to 3"),
    ({"label": None}, "label", "index of the right ending"),
    ({"label": "one"}, "label", "index of the right ending"),
    ({"endings": None}, "endings", "a list of at least 2 non-empty strings"),
    ({"endings": [" only one"]}, "endings", "a list of at least 2"),
    ({"endings": [" a", None, " c", " d"]}, "endings", "non-empty strings"),
    ({"ctx_b": None}, "ctx_b", "must be a string"),
])
def test_a_bad_hellaswag_row_is_refused_naming_file_row_and_field(tmp_path: Path, change: dict, field: str,
                                                                   why: str) -> None:
    data = _write(tmp_path / "hellaswag.jsonl", [GOOD, {**GOOD, **change}, GOOD])
    with pytest.raises(ConfigError) as caught:
        task_examples("hellaswag", str(data))
    message = str(caught.value)
    assert message.startswith(f"task 'hellaswag': {data} row 2: field '{field}' is "), message
    assert why in message and "task_data.hellaswag" in message


def test_a_row_in_the_second_file_of_a_dir_is_named_by_its_file(tmp_path: Path) -> None:
    _write(tmp_path / "a.jsonl", [GOOD, GOOD])
    second = _write(tmp_path / "b.jsonl", [GOOD, {**GOOD, "label": 9}])
    # datasets reads a column of mixed types as text: the label arrives as '9'
    with pytest.raises(ConfigError, match=rf"{second} row 2: field 'label' is '9'"):
        task_examples("hellaswag", str(tmp_path))


def test_good_hellaswag_rows_keep_their_labels(tmp_path: Path) -> None:
    data = _write(tmp_path / "h.jsonl", [GOOD, {**GOOD, "label": 3}])
    assert [e.label for e in task_examples("hellaswag", str(data))] == [1, 3]


@pytest.mark.parametrize("text", [None, "oneword"])
def test_a_lambada_row_without_a_passage_is_refused(tmp_path: Path, text: str | None) -> None:
    data = _write(tmp_path / "lambada.jsonl", [{"text": "a passage and its last word"}, {"text": text}])
    with pytest.raises(ConfigError, match=rf"task 'lambada': {data} row 2: field 'text' is "):
        task_examples("lambada", str(data))
