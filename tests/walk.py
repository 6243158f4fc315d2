"""The walk of `cfg` from `gptlab.apps.train.train` to the first build (`build_run`), measured (issue 32).

A step of the walk is a call of a gptlab function, by gptlab code, that is handed the config or a node of it (a
DictConfig or ListConfig argument); its room is its package (tests/test_layout.py's LAYER). Calls made by OmegaConf
or Hydra (the `${gptlab.on_cuda:...}` resolvers, constructors that instantiate calls) are theirs, not steps. Reported:
- rooms and files visited;
- stays: runs of consecutive steps in one room;
- climbs: stays in a room of a higher layer than the stay before (the walk came back up);
- returns: a step into a room that was visited, then left (none of its steps still running), and is entered again;
- how often each of COMPUTED_ONCE ran (any call, handed cfg or not).

Run `python tests/walk.py` for the report of a fresh run and of one continued with ckpt_path=; tests/test_walk.py
asserts no returns and each value computed once.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Optional

from omegaconf import DictConfig, ListConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "gptlab"
COMPUTED_ONCE = ("resume_mode", "check_resumable", "uses_fsdp", "count_parameters")
FIRST_BUILD = "build_run"


class _FirstBuild(BaseException):
    """Raised into the traced process when the first build starts: the walk ends there."""


@dataclass
class Walk:
    steps: list[tuple[str, str, str]] = field(default_factory=list)  # (room, file, function)
    returns: list[str] = field(default_factory=list)  # "room (function)" of each return
    calls: Counter = field(default_factory=Counter)  # COMPUTED_ONCE's calls

    def stays(self) -> list[str]:
        rooms = [room for room, _, _ in self.steps]
        return [room for i, room in enumerate(rooms) if i == 0 or rooms[i - 1] != room]

    def climbs(self, layer: dict[str, int]) -> int:
        stays = self.stays()
        return sum(layer[b] > layer[a] for a, b in zip(stays, stays[1:]))

    def report(self, layer: dict[str, int]) -> str:
        rooms = sorted({room for room, _, _ in self.steps}, key=lambda r: layer[r])
        files = sorted({f for _, f, _ in self.steps})
        return "\n".join([
            f"rooms visited: {len(rooms)} ({', '.join(rooms)}); files: {len(files)}",
            f"stays: {len(self.stays())} ({' > '.join(self.stays())})",
            f"climbs back up: {self.climbs(layer)}",
            f"returns to a room left: {len(self.returns)} ({', '.join(self.returns) or 'none'})",
            "computed: " + ", ".join(f"{name} x{self.calls[name]}" for name in COMPUTED_ONCE),
        ])


def _room(path: str) -> Optional[str]:
    """The package of a gptlab source file (None: not gptlab's); modules at the top (errors, atomic) are `gptlab`."""
    try:
        parts = Path(path).resolve().relative_to(SRC).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else "gptlab"


def _handed_cfg(frame: FrameType) -> bool:
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    return any(isinstance(frame.f_locals.get(n), (DictConfig, ListConfig)) for n in names)


def _called_by_gptlab(frame: FrameType) -> bool:
    """Whether every caller between `frame` and train() is gptlab code (not OmegaConf resolving an interpolation,
    not Hydra instantiating a node)."""
    caller = frame.f_back
    while caller is not None and not (caller.f_code.co_name == "train" and _room(caller.f_code.co_filename)):
        if _room(caller.f_code.co_filename) is None:
            return False
        caller = caller.f_back
    return caller is not None


def walk_train(cfg: DictConfig) -> Walk:
    """Runs `train(cfg)` until `build_run` is called, tracing the walk; the build itself is not run."""
    from gptlab.apps.train import train
    from gptlab.preflight import early_checks

    early_checks._PASSED.clear()  # a fresh process: nothing checked yet
    early_checks._TRAINS.clear()
    walk = Walk()
    steps: dict[int, tuple[Any, str]] = {}  # id(frame) -> (code, room) of each step, to see which still run

    def open_rooms(frame: Optional[FrameType]) -> set[str]:
        found = set()
        while frame is not None:
            mark = steps.get(id(frame))
            if mark is not None and mark[0] is frame.f_code:
                found.add(mark[1])
            frame = frame.f_back
        return found

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return None
        room = _room(frame.f_code.co_filename)
        if room is None:
            return None
        name = frame.f_code.co_name
        if name in COMPUTED_ONCE:
            walk.calls[name] += 1
        if not _handed_cfg(frame) or not _called_by_gptlab(frame):
            return None
        visited = {r for r, _, _ in walk.steps}
        if room in visited and room not in open_rooms(frame.f_back):
            walk.returns.append(f"{room} ({name})")
        steps[id(frame)] = (frame.f_code, room)
        walk.steps.append((room, str(Path(frame.f_code.co_filename).resolve().relative_to(SRC)), name))
        if name == FIRST_BUILD:
            raise _FirstBuild
        return None

    sys.settrace(tracer)
    try:
        train(cfg)
    except _FirstBuild:
        pass
    finally:
        sys.settrace(None)
    return walk


def _main() -> None:
    from helpers import compose_tiny, train_in_process
    from test_layout import LAYER

    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "first"
        print("fresh run:\n" + walk_train(compose_tiny(first, "trainer.max_steps=1")).report(LAYER))
        train_in_process(first, "trainer.max_steps=1")
        cont = compose_tiny(Path(tmp) / "second", "trainer.max_steps=2", f"ckpt_path={first}")
        print("\ncontinued with ckpt_path=:\n" + walk_train(cont).report(LAYER))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    _main()
