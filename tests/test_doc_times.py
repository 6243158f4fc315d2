"""Every run time README.md, docs/ and conf/ promise is one scripts/measure_doc_times.py measured (issue 55, item 4):
checked against the committed record, without running anything."""

from __future__ import annotations

from pathlib import Path

from gptlab.tools.doc_times import RECORD, TIMED, minutes, problems, promises, read_record, rewrite


def test_every_time_promise_in_the_docs_is_the_recorded_measurement() -> None:
    record = read_record()
    assert set(record) <= set(TIMED), f"{RECORD.name} holds keys no command has: {set(record) - set(TIMED)}"
    for key, measured in record.items():  # each says where and under what load it was measured
        assert measured["seconds"] > 0 and measured["cores"] >= 1 and measured["cpu"] and measured["date"], key
        assert "load_during" in measured and measured["command"] == " ".join(TIMED[key].command), key
    assert problems(record) == []


def _page(root: Path, text: str) -> Path:
    (root / "docs").mkdir(exist_ok=True)
    page = root / "docs" / "page.md"
    page.write_text(text)
    return page


def test_an_unmarked_or_stale_promise_is_named_and_a_marked_one_is_rewritten(tmp_path: Path) -> None:
    record = {"train_default": {"seconds": 250.0, "load_during": 3.4}}
    page = _page(tmp_path, "Runs in about 2 minutes at load 1 <!-- time: train_default -->.\n"
                           "    python x.py   # ~7 min [time: train_default]\n"
                           "A drill takes about 6 min on 2 cores.\n"
                           "Takes about 3 minutes [time: nothing_measures_this].\n"
                           "A step takes ~10 s: seconds are not a command's run time.\n")
    found = problems(record, tmp_path)
    assert [line.split(":")[1] for line in found] == ["1", "2", "3", "4"]
    assert "no [time: KEY] marker" in found[2] and "not measured" in found[3] and "4 min" in found[0]
    rewritten = rewrite(page.read_text(), record)
    assert rewritten.splitlines()[:2] == ["Runs in about 4 minutes at load 3 <!-- time: train_default -->.",
                                          "    python x.py   # ~4 min [time: train_default]"]
    page.write_text(rewritten)
    assert [line.split(":")[1] for line in problems(record, tmp_path)] == ["3", "4"]


def test_promise_units_and_rounding() -> None:
    found = list(promises("about 1.5 hours [time: a]; ~1 minute; about 12-minute runs", Path("x")))
    assert [(p.number, p.unit, p.key) for p in found] == [("1.5", "hours", "a"), ("1", "minute", "a"),
                                                          ("12", "minute", "a")]
    assert minutes(20) == 1 and minutes(89) == 1 and minutes(91) == 2
    assert rewrite("about 1.5 hours [time: a]\n", {"a": {"seconds": 61}}) == "about 1 minute [time: a]\n"
