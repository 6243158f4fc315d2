"""Every run time the docs promise ("about N minutes") comes from a measurement: which command each promise times,
where the measurements are recorded, and how the docs are checked against (and rewritten from) that record.

A promise is marked on its line by the key of what it times: `<!-- time: KEY -->` in Markdown prose, `[time: KEY]`
in a code block or a YAML comment. `scripts/measure_doc_times.py` runs each key's command, writes what it measured to
RECORD (seconds, the machine, its load, the date) and puts the minutes into every marked promise;
tests/test_doc_times.py fails on a time promise without a marker, or whose number is not the record's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[3]
RECORD = ROOT / "docs" / "measured_times.json"
# Where promises live: the README, the docs pages, the configs' comments and the schema's descriptions (which
# scripts/gen_config_docs.py renders into docs/reference/configuration.md).
SCANNED = ("README.md", "docs/**/*.md", "conf/**/*.yaml", "src/gptlab/config/schemas.py")


@dataclass(frozen=True)
class Timed:
    """A command the docs promise a time for, run from the checkout's root with the record's `args`."""

    command: tuple[str, ...]
    what: str


# The commands behind the promises. Each is run as typed, in a fresh output dir (hydra.run.dir / sweep dir outside
# the checkout), from the launch of the interpreter to its exit: imports, data, training, validations, checkpoints.
TIMED = {
    "train_default": Timed(("python", "src/train.py"), "the default run: nano on pydocs, 240 steps"),
    "ablation_job": Timed(("python", "src/train.py", "experiment=ablate_norm", "model.norm=pre"),
                          "one job of the nano-on-pydocs ablations (200 steps, a validation every 50)"),
}

# "about 3 minutes", "~3 min", "about 1.5 hours": a number and a unit of minutes or hours (seconds are facts about
# a step or a test, not the run time of a command a reader types).
PROMISE = re.compile(r"(?:\babout|~)\s*(\d+(?:\.\d+)?)[\s-]*(min(?:ute)?s?|hours?)\b", re.IGNORECASE)
MARKER = re.compile(r"<!-- time: (\w+) -->|\[time: (\w+)\]")
LOAD = re.compile(r"\bat load (\d+)\b")  # a marked line may say under what load its time was measured


@dataclass(frozen=True)
class Promise:
    path: Path  # relative to the checkout
    line: int
    text: str  # as written: "about 2 minutes", "~2 min"
    number: str
    unit: str
    key: str | None  # the marker on its line, if any
    line_text: str = ""

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def scanned_files(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in SCANNED for p in root.glob(pattern) if p.is_file()})


def promises(text: str, path: Path) -> Iterator[Promise]:
    """Every time promise in `text`, with the marker of its line (one marker per line: it covers that line's
    promises)."""
    for number, line in enumerate(text.splitlines(), 1):
        marker = MARKER.search(line)
        key = (marker.group(1) or marker.group(2)) if marker else None
        for found in PROMISE.finditer(line):
            yield Promise(path, number, found.group(0), found.group(1), found.group(2), key, line)


def minutes(seconds: float) -> int:
    """The whole minutes a promise states for a measured time (at least 1)."""
    return max(1, round(seconds / 60))


def stated(promise: Promise) -> float:
    """The minutes a promise states."""
    value = float(promise.number)
    return value * 60 if promise.unit.lower().startswith("hour") else value


def read_record(path: Path = RECORD) -> dict[str, dict]:
    return json.loads(path.read_text()) if path.is_file() else {}


def problems(record: dict[str, dict], root: Path = ROOT) -> list[str]:
    """One line per promise that no measurement backs: unmarked, marked with a key nothing measures, or stating
    another number than the record's."""
    out = []
    for path in scanned_files(root):
        for p in promises(path.read_text(), path.relative_to(root)):
            if p.key is None:
                out.append(f"{p.where()}: '{p.text}' has no [time: KEY] marker (keys: "
                           f"{', '.join(TIMED)}); mark it and run scripts/measure_doc_times.py, or drop the time")
            elif p.key not in TIMED or p.key not in record:
                out.append(f"{p.where()}: [time: {p.key}] is not measured in {RECORD.name} "
                           f"(measured: {', '.join(record) or 'nothing'})")
            elif stated(p) != minutes(record[p.key]["seconds"]) or not _load_matches(p, record[p.key]):
                out.append(f"{p.where()}: says '{p.text}', {RECORD.name} has {p.key} at "
                           f"{record[p.key]['seconds']:.0f} s ({minutes(record[p.key]['seconds'])} min) at load "
                           f"{_load(record[p.key])}: run scripts/measure_doc_times.py --write-only")
    return out


def _load(measured: dict) -> int:
    return round(measured.get("load_during") or measured.get("load_before") or 0)


def _load_matches(promise: Promise, measured: dict) -> bool:
    return all(int(found) == _load(measured) for found in LOAD.findall(promise.line_text))


def rewrite(text: str, record: dict[str, dict]) -> str:
    """`text` with each marked promise's number replaced by its key's measured minutes."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        marker = MARKER.search(line)
        key = (marker.group(1) or marker.group(2)) if marker else None
        if key in record:
            value = minutes(record[key]["seconds"])
            line = LOAD.sub(f"at load {_load(record[key])}", line)
            lines[i] = PROMISE.sub(lambda m, value=value: _restated(m, value), line)
    return "".join(lines)


def _restated(found: re.Match, value: int) -> str:
    """The promise with its number set to `value` minutes, in the promise's own words ("about", "~", "min")."""
    unit = found.group(2)
    if unit.lower().startswith("hour"):
        unit = "minutes"
    if unit.lower() in ("minute", "minutes") and found.group(0)[found.end(1) - found.start(0)] != "-":
        unit = "minute" if value == 1 else "minutes"  # "a 12-minute run" keeps its singular
    text, start = found.group(0), found.start(0)
    return text[:found.start(1) - start] + str(value) + text[found.end(1) - start:found.start(2) - start] + unit
