"""Every way out that a sweep, report, run-dir or launcher refusal offers works when followed (issue 33, items 2 and
3), for the modules of ways_out.AREAS["test_ways_out_runs.py"].

The reports are run as `python scripts/ablation_report.py` and `python scripts/mup_transfer_plot.py` run them: each
script's own main (its argparse included, `user_errors_exit` left out so the raise site is seen), in this process,
on tiny sweep dirs of fake jobs (test_report_stats.make_job: a summary, Hydra's overrides, a resolved config and
val/loss events). A refusal's words are read as a user would (`--flag value` to type, "one of a, b", "e.g. 0.05",
"the variants are: ...", "choose a new path", "move its job dir out of the sweep dir", "restore it", "pass the dir
..."), each way out is done on a fresh copy of the case, and the script runs again: it writes its report, or refuses
anew with another message, whose first way out is followed in turn.

The sweep and launcher checks run as Hydra's callbacks run them, on the config a `-m` launch composes (the compose
API in MULTIRUN mode), and are followed by tests/ways_out.py's reader where they offer `key=value`; the run dir lock
as train's GuardRunDir takes it, with another run's lock held in this process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import re
import runpy
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional
from unittest import mock

import pytest
import ways_out
from helpers import CONF_DIR, ROOT
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from test_report_stats import make_job
from ways_out import Refusal, follow, unreached

from gptlab.errors import ConfigError
from gptlab.launch.hydra_callbacks import CheckSweep
from gptlab.runs import relayout
from gptlab.runs.run_dir_lock import lock_run_dir, release
from gptlab.runs.sweep_jobs import check_same_sweep_job, check_sweep_is_multirun

REACHED: set = set()  # the raise sites the cases of this file reach, for test_every_raise_..._is_reached_by_a_case
DEPTH = 3
SWEEPS = Path()  # a dir for the launcher cases' sweep dirs (the fixture sweeps_dir)


# ---- the scripts, in this process -----------------------------------------------------------------------------
@functools.cache
def script_main(script: str) -> Callable[[], None]:
    """The script's main without user_errors_exit (which prints the refusal and exits 2)."""
    return runpy.run_path(str(ROOT / "scripts" / script), run_name="gptlab_ways_out")["main"].__wrapped__


def script_refusal(script: str, argv: tuple[str, ...]) -> Optional[Refusal]:
    """What `python scripts/<script> <argv>` refuses (argparse's line, or the ConfigError with its raise site); None:
    it wrote its report."""
    err = io.StringIO()
    with mock.patch.object(sys, "argv", [f"scripts/{script}", *argv]), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(io.StringIO()):
        try:
            script_main(script)()
        except SystemExit as exit_:
            assert exit_.code == 2, (script, argv, exit_.code, err.getvalue())
            lines = err.getvalue().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("gptlab: error: "), err.getvalue()
            return Refusal(lines[0].removeprefix("gptlab: error: "), None)
        except Exception as exc:  # noqa: BLE001 - anything but a user error is raised again by as_refusal
            refused = ways_out.as_refusal(exc)
            REACHED.add(refused.site)
            return refused
    return None


# ---- tiny sweeps of fake jobs ----------------------------------------------------------------------------------
def ablation_sweep(root: Path, keys: dict[str, tuple[str, ...]] | None = None, seeds: int = 2) -> Path:
    """Jobs over the product of `keys`' values (default model.norm=pre,post) × seeds; variant i is 0.1 worse than
    variant i - 1."""
    keys = keys or {"model.norm": ("pre", "post")}
    sweep, index = root / "sweep", 0
    settings: list[dict[str, str]] = [{}]
    for key, values in keys.items():
        settings = [{**s, key: v} for s in settings for v in values]
    for i, setting in enumerate(settings):
        for seed in range(1, seeds + 1):
            final = 3.0 + 0.1 * i + 0.01 * seed
            make_job(sweep, index, {**setting, "seed": str(seed)}, [final + 0.5, final])
            index += 1
    return sweep


LADDER = {"w16": (1, 16), "w24": (1, 24), "w32": (2, 32)}


def ladder_job(sweep: Path, index: int, size: str, extra: dict[str, str], seed: int) -> None:
    layers, width = LADDER[size]
    steps = {"w16": 20, "w24": 60, "w32": 200}[size]
    final = 2.0 + 2.0 / (layers * width * steps) ** 0.3 + 0.002 * seed
    make_job(sweep, index, {**extra, "+ladder": size, "seed": str(seed)}, [final + 0.3, final],
             steps=[steps // 2 - 1, steps - 1], model={"n_layer": layers, "n_embd": width})


def ladder_sweep(root: Path, sizes: tuple[str, ...] = tuple(LADDER), lrs: tuple[str, ...] = ()) -> Path:
    sweep, index = root / "sweep", 0
    for lr in lrs or (None,):
        for size in sizes:
            for seed in (1, 2):
                ladder_job(sweep, index, size, {"optimizer.lr": lr} if lr else {}, seed)
                index += 1
    return sweep


def lr_sweep(root: Path) -> Path:
    return ablation_sweep(root, {"model.norm": ("pre", "post"), "optimizer.lr": ("1e-3", "3e-3", "1e-2")}, seeds=1)


def mup_sweep(root: Path) -> Path:
    sweep, index = root / "sweep", 0
    for param in ("standard", "mup"):
        for width in (32, 64):
            for lr in ("1e-3", "1e-2"):
                final = 3.0 + (0.1 if lr == "1e-2" and (param, width) == ("standard", 64) else 0.0) + width / 1000
                make_job(sweep, index, {"model.parametrization": param, "model.n_embd": str(width),
                                        "optimizer.lr": lr}, [final + 0.5, final], model={"n_embd": width})
                index += 1
    return sweep


def damaged(sweep: Path, jobs: list[str], name: str, actions: dict, text: Optional[str] = None) -> None:
    """Remove `name` from the `jobs`' dirs (or write `text` over it); "restore" in a message puts them back."""
    kept = {sweep / job / name: (sweep / job / name).read_bytes() for job in jobs}
    for path in kept:
        path.unlink() if text is None else path.write_text(text)
    actions[r"\brestore\b"] = lambda: [path.write_bytes(data) for path, data in kept.items()]


# ---- reading a script's refusal ------------------------------------------------------------------------------
@dataclass
class Case:
    script: str
    argv: tuple[str, ...]
    actions: dict  # words of a message -> what a user does on reading them (a file put back, sizes launched)


STAND_IN = {"ablation_report.py": ablation_sweep, "mup_transfer_plot.py": mup_sweep}
SWITCHES = {"--overwrite"}  # flags without a value
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)(?:[ =]'([^']*)'|[ =]((?!--)[^\s,;()]+))?")


def flag_value(argv: tuple[str, ...], flag: str) -> Optional[str]:
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def with_flag(argv: tuple[str, ...], flag: str, value: Optional[str] = None) -> tuple[str, ...]:
    """`argv` with `flag value` typed in (replacing the flag's value), or the switch `flag` added."""
    if value is None:
        return argv if flag in argv else (*argv, flag)
    if flag in argv:
        i = argv.index(flag)
        return (*argv[:i + 1], value, *argv[i + 2:])
    return (*argv, flag, value)


def read(message: str, case: Case, root: Path) -> list[tuple[str, Callable[[], tuple[str, ...]]]]:
    """Each way out `message` offers for `case` (built under `root`), as (the words, what doing it gives: the
    command line to run again, after whatever the words say to do to the files)."""
    argv, ways = case.argv, []

    def add(said: str, do: Callable[[], tuple[str, ...]]) -> None:
        ways.append((said, do))

    first = FLAG.match(message) or re.match(r"argument (--[a-z][\w-]*):", message)  # argparse's words
    refused = first.group(1) if first else None
    for found in FLAG.finditer(message):
        flag, value = found.group(1), found.group(2) or (found.group(3) or "").rstrip(".")
        if flag in SWITCHES and flag not in argv:
            add(found.group(0), functools.partial(with_flag, argv, flag))
        elif flag not in SWITCHES and value and found.start() > 0 and value != flag_value(argv, flag) \
                and not value.startswith(("<", "{")):
            add(found.group(0), functools.partial(with_flag, argv, flag, value))
    if refused and refused not in SWITCHES and not refused.startswith("--out"):
        described = re.search(r"is not one of ([\w, ]+)\.|choose from ([^)]*)\)|use one of ([^.]*?)(?:, e\.g\.|\.)",
                              message)
        values = re.findall(r"[\w.]+", next(filter(None, described.groups())) if described else "")
        values += [v.rstrip(".") for v in re.findall(r"e\.g\. (?!--)([-\w.]+)", message)]
        values += re.findall(r"at least (\d+)", message)
        for value in values:
            add(value, functools.partial(with_flag, argv, refused, value))
    for flag in re.findall(r"\bdrop (--[a-z][\w-]*)", message):
        i = argv.index(flag)
        add(f"drop {flag}", lambda i=i: (*argv[:i], *argv[i + 2:]))
    variants = re.search(r"the variants are: (.*)\. Name one of them", message)
    for label in variants.group(1).split("; ") if variants else []:
        add(label, functools.partial(with_flag, argv, "--baseline", label))
    sweep = Path(argv[0])
    if re.search(r"\bpass the (?:sweep )?dir\b", message):
        add("pass the dir", lambda: (str(STAND_IN[case.script](root / "stand-in")), *argv[1:]))
    if "move its job dir out of the sweep dir" in message or "move the dirs out of the sweep dir" in message:
        named = {sweep / p.relative_to(sweep).parts[0] for p in map(Path, re.findall(r"(/[^\s;:()']+)", message))
                 if sweep in p.parents}
        named |= {sweep / name for name in re.findall(r"(?:^|: |; )(\w+) \(", message.split("left out: ")[-1])
                  if "left out: " in message}

        def move() -> tuple[str, ...]:
            assert named, f"{message!r} names no job dir to move"
            for job in named:
                shutil.move(str(job), str(root / "moved" / job.name))
            return argv
        (root / "moved").mkdir(exist_ok=True)
        add("move the job dir out", move)
    out = re.match(r"(--out)='([^']*)'", message)
    if out:
        path = Path(out.group(2))
        if "choose a new path" in message:
            new = path.with_name(f"new-{path.name}")
            add("choose a new path", functools.partial(with_flag, argv, "--out", str(new)))
        if "give the path of the file to write" in message:
            add("a file's path", functools.partial(with_flag, argv, "--out", str(path / "plot.png")))
        if "Write it outside the run's checkpoints/ dir" in message:
            run = next(p for p in path.parents if p.name == "checkpoints").parent
            add("outside checkpoints/", functools.partial(with_flag, argv, "--out", str(run / path.name)))
    for words, do in case.actions.items():
        if re.search(words, message):
            add(words, lambda do=do: (do(), argv)[1])
    return ways


def follow_script(build: Callable[[Path], Case], tmp_path: Path) -> list[str]:
    """Follow every way out of the refusal of the case `build` makes (each on a fresh copy of the case); each must
    lead to a report, or to another refusal whose first way out is followed in turn, DEPTH refusals deep."""
    broken: list[str] = []
    first_case = build(tmp_path / "case")
    first = script_refusal(first_case.script, first_case.argv)
    assert first is not None, f"{first_case.script} {' '.join(first_case.argv)} is not refused"
    count = len(read(first.message, first_case, tmp_path / "case"))
    if not count:
        return [f"no way out in {first.message!r}"]
    for i in range(count):
        root = tmp_path / f"way{i}"
        case = build(root)
        refused = script_refusal(case.script, case.argv)
        said, do = read(refused.message, case, root)[i]
        path = [f"{' '.join(case.argv)}: {refused.message}", said]
        argv = do()
        for _ in range(DEPTH):
            again = script_refusal(case.script, argv)
            if again is None:
                break
            if again.message == refused.message:
                broken.append(f"following {said!r} gives the same refusal: {' -> '.join(path)}")
                break
            ways = read(again.message, Case(case.script, argv, case.actions), root)
            if not ways:
                broken.append(f"no way out in {again.message!r}: {' -> '.join(path)}")
                break
            refused, (said, do) = again, ways[0]
            path += [f"{' '.join(argv)}: {again.message}", said]
            argv = do()
        else:
            broken.append(f"still refused after following its ways out: {' -> '.join(path)}")
    return broken


def ablation(*flags: str, sweep: Callable[[Path], Path] = ablation_sweep, damage: Optional[tuple] = None,
             sizes: bool = False) -> Callable[[Path], Case]:
    def build(root: Path) -> Case:
        made, actions = sweep(root), {}
        if damage:
            damaged(made, *damage[:2], actions, *damage[2:])
        if sizes:  # "add sizes with +ladder=...": the sweep launched with one more size
            actions[r"add sizes with \+ladder="] = lambda: [ladder_job(made, 100 + s, "w32", {}, s) for s in (1, 2)]
        return Case("ablation_report.py", (str(made), *flags), actions)
    return build


def mup(*flags: str, sweep: Callable[[Path], Path] = mup_sweep, out: Optional[Callable[[Path], Path]] = None):
    def build(root: Path) -> Case:
        made = sweep(root)
        return Case("mup_transfer_plot.py", (str(made), *flags, *(("--out", str(out(root))) if out else ())), {})
    return build


def existing_file(root: Path) -> Path:
    (root / "mine.png").write_bytes(b"someone's plot")
    return root / "mine.png"


def a_dir(root: Path) -> Path:
    (root / "plots").mkdir()
    return root / "plots"


def in_checkpoints(root: Path) -> Path:
    (root / "run" / ".hydra").mkdir(parents=True)
    (root / "run" / "checkpoints").mkdir()
    (root / "run" / "checkpoints" / "last.ckpt").write_bytes(b"the run's checkpoint")
    return root / "run" / "checkpoints" / "mup.png"


def two_keys(root: Path) -> Path:
    return ablation_sweep(root, {"model.norm": ("pre", "post"), "model.pos_emb": ("learned", "rope")}, seeds=1)


def two_sizes(root: Path) -> Path:
    return ladder_sweep(root, sizes=("w16", "w24"))


def ladder_over_lrs(root: Path) -> Path:
    return ladder_sweep(root, lrs=("1e-3", "3e-3"))


def bogus_lr(root: Path) -> Path:
    sweep = lr_sweep(root)
    overrides = sweep / "0" / ".hydra" / "overrides.yaml"
    overrides.write_text(overrides.read_text().replace("optimizer.lr=1e-3", "optimizer.lr=bogus"))
    return sweep


def empty(root: Path) -> Path:
    (root / "sweep").mkdir(parents=True)
    return root / "sweep"


def a_summary(root: Path) -> Path:
    """A job's run_summary.json, given where its sweep dir belongs (a user copying the path of a file)."""
    summary = root / "sweep" / "0" / "run_summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text("{}")
    return summary


def unfinished(root: Path) -> Case:
    """A sweep launched (its sweep_config.json) and stopped before any job wrote its run summary; continuing it, as
    the refusal says, finishes the jobs."""
    sweep = ablation_sweep(root)
    (sweep / "sweep_config.json").write_text(json.dumps({"task_overrides": ["model.norm=pre,post", "seed=1,2"]}))
    actions: dict = {}
    damaged(sweep, ["0", "1", "2", "3"], "run_summary.json", actions)
    actions[r"continue it with python src/train\.py -m model\.norm=pre,post seed=1,2 hydra\.sweep\.dir="] = \
        actions.pop(r"\brestore\b")  # what the continued sweep leaves: each job's summary
    return Case("ablation_report.py", (str(sweep),), actions)


REPORT_CASES = {
    "a sweep stopped before any job finished": unfinished,
    "no such sweep dir": lambda root: Case("ablation_report.py", (str(root / "nosuch"),), {}),
    "an empty dir": ablation(sweep=empty),
    "every job damaged": ablation(damage=(["0", "1", "2", "3"], ".hydra/overrides.yaml", "{not: a list")),
    "--baseline without =": ablation("--baseline", "pre"),
    "--baseline a value Hydra refuses": ablation("--baseline", "model.norm=[pre"),
    "--baseline no variant": ablation("--baseline", "model.norm=mid"),
    "--baseline two variants": ablation("--baseline", "model.norm=pre", sweep=two_keys),
    "--alpha out of range": ablation("--alpha", "2"),
    "--margin not positive": ablation("--margin", "-0.005"),
    "--x not an axis": ablation("--x", "bogus"),
    "--band not a band": ablation("--band", "bogus"),
    "--boot too few": ablation("--boot", "5"),
    "--target-flops negative": ablation("--target-flops", "-1"),
    "--x flops without a model": ablation("--x", "flops", damage=(["1"], "config_resolved.yaml")),
    "lr and sizes swept together": ablation("--boot", "10", sweep=ladder_over_lrs),
    "a ladder of two sizes": ablation("--boot", "10", sweep=two_sizes, sizes=True),
    "--margin on a ladder": ablation("--boot", "10", "--margin", "0.005", "--test", "welch", sweep=two_sizes),
    "a ladder job without a model": ablation("--boot", "10", sweep=ladder_sweep,
                                             damage=(["0"], "config_resolved.yaml")),
    "an lr that is not a number": ablation(sweep=bogus_lr),
    "--lr-key seed": ablation("--lr-key", "seed", sweep=lr_sweep),
    "--lr-key not a learning rate": ablation("--lr-key", "model.norm", sweep=lr_sweep),
    "--size-key seed": ablation("--size-key", "seed"),
    "an lr sweep without models": ablation(sweep=lr_sweep, damage=(["0", "1", "2", "3", "4", "5"],
                                                                    "config_resolved.yaml")),
    "mup: not a transfer sweep": mup(sweep=ablation_sweep),
    "mup: no such sweep dir": lambda root: Case("mup_transfer_plot.py", (str(root / "nosuch"),), {}),
    "a run's run_summary.json as the sweep dir": lambda root: Case("ablation_report.py", (str(a_summary(root)),), {}),
    "mup: --out exists": mup(out=existing_file),
    "mup: --out a dir": mup(out=a_dir),
    "mup: --out in a run's checkpoints": mup(out=in_checkpoints),
}


@pytest.mark.parametrize("name", REPORT_CASES)
def test_each_report_refusals_ways_out_work(name: str, tmp_path: Path) -> None:
    broken = follow_script(REPORT_CASES[name], tmp_path)
    assert not broken, "\n".join(broken)


# ---- the sweep checks of a `-m` launch (hydra_callbacks.CheckSweep, run_dir_guard.GuardRunDir) ---------------
@functools.cache
def launch_config(command: tuple[str, ...], multirun: bool = True) -> DictConfig:
    """The master config Hydra composes for `python src/train.py [-m] <command>`, hydra node included."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return GlobalHydra.instance().hydra.compose_config(
                "train", list(command), run_mode=RunMode.MULTIRUN if multirun else RunMode.RUN)
    finally:
        GlobalHydra.instance().clear()


def refused_by(check: Callable[[], None]) -> Optional[Refusal]:
    try:
        check()
    except ConfigError as err:
        refused = ways_out.as_refusal(err)
        REACHED.add(refused.site)
        return refused
    return None


def sweep_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What `python src/train.py -m <command>` refuses before Hydra writes anything (the callback CheckSweep)."""
    cfg = launch_config(command)
    return refused_by(lambda: CheckSweep.check(cfg))


def single_run_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What `python src/train.py <command>` (no -m) refuses for the sweep its config carries (GuardRunDir)."""
    return refused_by(lambda: check_sweep_is_multirun(launch_config(command, multirun=False)))


@pytest.fixture(autouse=True)
def sweeps_dir(tmp_path_factory) -> None:
    global SWEEPS
    SWEEPS = tmp_path_factory.mktemp("sweeps")


def launcher_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """`sweep_refusal` of a sweep with hydra/launcher=local_gpus on a machine with no GPU and no
    CUDA_VISIBLE_DEVICES (or the one the command sets with `env:CUDA_VISIBLE_DEVICES=...`), into a sweep dir of its
    own (SWEEPS/<the command's hash>)."""
    env = [o.split("=", 1)[1] for o in command if o.startswith("env:CUDA_VISIBLE_DEVICES=")]
    overrides = tuple(o for o in command if not o.startswith("env:"))
    own = SWEEPS / hashlib.sha1(" ".join(overrides).encode()).hexdigest()[:12]
    with mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": env[-1]} if env else {}), \
            mock.patch("torch.cuda.device_count", lambda: 0):
        if not env:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        given = any(o.startswith("hydra.sweep.dir=") for o in overrides)
        return sweep_refusal(overrides if given else (*overrides, f"hydra.sweep.dir={own}"))


def test_a_repeated_swept_value_is_followed(tmp_path: Path) -> None:
    command = ("seed=1,1", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert sweep_refusal(command) is not None
    walk = follow(command, DEPTH, refuse=sweep_refusal)
    assert not walk.broken and walk.followed, walk.broken


def test_a_sweep_launched_into_another_sweeps_dir_is_followed(tmp_path: Path) -> None:
    """"Launch the same sweep command to resume it, or give a new hydra.sweep.dir": both pass, and nothing was
    written into the other sweep's dir."""
    first = ("model.norm=pre,post", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert sweep_refusal(first) is None
    before = (tmp_path / "sweep" / "sweep_config.json").read_text()
    other = ("model.norm=pre,post", "model.n_layer=2", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    refused = sweep_refusal(other)
    assert refused and "Launch the same sweep command" in refused.message, refused
    assert "give a new hydra.sweep.dir" in refused.message and "nothing was written" in refused.message
    assert (tmp_path / "sweep" / "sweep_config.json").read_text() == before
    assert sweep_refusal(first) is None  # the same sweep command
    assert sweep_refusal(ways_out.typed_in(other, "hydra.sweep.dir", str(tmp_path / "new"))) is None


def test_a_job_dir_of_another_config_is_followed(tmp_path: Path) -> None:
    """check_same_sweep_job: a relaunch whose job 0 was run with another config; the same command, or a new
    hydra.sweep.dir, passes."""
    def config(command: tuple[str, ...], sweep: Path) -> DictConfig:
        return ways_out.compose_config(list(command), sweep / "0")

    first, other = ("model.norm=pre",), ("model.norm=pre", "model.n_layer=2")
    (tmp_path / "sweep" / "0").mkdir(parents=True)
    OmegaConf.save(config(first, tmp_path / "sweep"), tmp_path / "sweep" / "0" / "config_resolved.yaml", resolve=True)
    refused = refused_by(lambda: check_same_sweep_job(config(other, tmp_path / "sweep"), tmp_path / "sweep" / "0"))
    assert refused and "launch the same sweep command" in refused.message, refused
    assert "give a new hydra.sweep.dir" in refused.message
    assert refused_by(lambda: check_same_sweep_job(config(first, tmp_path / "sweep"), tmp_path / "sweep" / "0")) \
        is None
    new = tmp_path / "new"
    assert refused_by(lambda: check_same_sweep_job(config(other, new), new / "0")) is None


def test_an_experiments_sweep_without_m_is_followed(tmp_path: Path) -> None:
    """"Add -m to run the sweep, or pin the swept keys (e.g. ...)": the pin is typed by the follower; -m launches
    the sweep, whose own checks pass."""
    command = ("experiment=ablate_norm",)
    refused = single_run_refusal(command)
    assert refused and "Add -m" in refused.message, refused
    walk = follow(command, DEPTH, refuse=single_run_refusal)
    assert not walk.broken and walk.followed, walk.broken
    assert sweep_refusal((*command, f"hydra.sweep.dir={tmp_path / 'sweep'}")) is None


LAUNCHER = "hydra/launcher=local_gpus"
LAUNCHER_CASES = [
    (LAUNCHER,), (LAUNCHER, "hydra.launcher.device_ids=[0,0]"), (LAUNCHER, "hydra.launcher.device_ids=[0,-1]"),
    (LAUNCHER, "trainer.devices=4", "hydra.launcher.device_ids=[0,1]"),
    (LAUNCHER, "trainer.devices=auto", "hydra.launcher.device_ids=[0,1]"),
    (LAUNCHER, "trainer.devices=-1", "hydra.launcher.device_ids=[0,1]"),
    (LAUNCHER, "hydra.launcher.devices_per_job=0", "hydra.launcher.device_ids=[0,1]"),
    (LAUNCHER, "hydra.launcher.devices_per_job=3", "hydra.launcher.device_ids=[0,1]"),
    (LAUNCHER, "env:CUDA_VISIBLE_DEVICES=GPU-3f2a,GPU-77c1"),
]


@pytest.mark.parametrize("command", LAUNCHER_CASES, ids=" ".join)
def test_each_gpu_launcher_refusals_ways_out_work(command: tuple[str, ...]) -> None:
    refused = launcher_refusal(command)
    assert refused is not None, command
    walk = follow(command, DEPTH, refuse=launcher_refusal)
    assert not walk.broken and walk.followed, walk.broken
    for way in ways_out.ways_out(refused.message, command).ways:  # each value offered is one the launcher takes
        assert launcher_refusal(way.command) is None, (way, launcher_refusal(way.command))


def test_the_launcher_on_a_machine_without_gpus_can_run_the_sweep_without_it() -> None:
    refused = launcher_refusal((LAUNCHER,))
    assert "run the sweep without it" in refused.message
    assert launcher_refusal(()) is None  # the sweep without hydra/launcher=local_gpus


def test_a_refused_launcher_writes_nothing_and_its_way_out_is_the_same_sweep(tmp_path: Path, capsys) -> None:
    """Hydra's callbacks in their order, as a `-m` launch calls them: the pool is refused before the sweep dir is
    made, so the launch with the way out typed (trainer.devices=2) into the same hydra.sweep.dir is a new sweep
    there, not "another sweep" that the refused launch recorded."""
    from hydra._internal.callbacks import Callbacks

    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    cfg = launch_config((LAUNCHER, "model.norm=pre,post", "trainer.devices=4", "hydra.launcher.device_ids=[0,1]",
                         sweep))
    with pytest.raises(SystemExit) as exit_:
        Callbacks(cfg).on_multirun_start(config=cfg)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("gptlab: error: each job needs trainer.devices=4"), err
    assert not (tmp_path / "sweep").exists(), sorted(str(p) for p in (tmp_path / "sweep").rglob("*"))
    assert launcher_refusal((LAUNCHER, "model.norm=pre,post", "trainer.devices=2", "hydra.launcher.device_ids=[0,1]",
                             sweep)) is None


FUSED = "hydra/launcher=fused"
# One case per raise of launch/fused_groups.py (tests/test_fused.py checks the other keys each raise names); the
# last two are the group's memory check.
FUSED_CASES = [(FUSED, "trainer=ddp", "trainer.devices=1"), (FUSED, "trainer.devices=2"),
               (FUSED, "runtime.compile=true"), (FUSED, "hydra.launcher.max_members=0"),
               (FUSED, "data.batch_size=128"), (FUSED, "model=gpt2_small"), (FUSED, "budget=seconds:60")]
FUSED_FREE = 8e9  # the free memory a fused group's check is given here: the census must not depend on this machine


def fused_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What hydra/launcher=fused refuses of a sweep whose jobs are max_members copies of `command`
    (gptlab.launch.fused_groups), before any job runs."""
    from gptlab.launch.fused_groups import check_group_memory, plan_groups

    cfg = launch_config(command)
    if not str(cfg.hydra.launcher.get("_target_")).endswith("FusedLauncher"):
        return None  # another launcher: nothing fuses, nothing of this is checked
    with open_dict(cfg):
        cfg.hydra.job.num = 0  # the sweep's first job

    def check() -> None:
        plan_groups([cfg], cfg.hydra.launcher.max_members)
        check_group_memory([cfg] * cfg.hydra.launcher.max_members, free=FUSED_FREE)

    return refused_by(check)


@pytest.mark.parametrize("command", FUSED_CASES, ids=" ".join)
def test_each_fused_launcher_refusals_ways_out_work(command: tuple[str, ...]) -> None:
    refused = fused_refusal(command)
    assert refused is not None, command
    walk = follow(command, DEPTH, refuse=fused_refusal)
    assert not walk.broken and walk.followed, walk.broken
    assert "hydra.launcher.max_members" in refused.message or "without hydra/launcher=fused" in refused.message
    without = tuple(o for o in command if not o.startswith(("hydra/launcher=", "hydra.launcher.")))
    assert fused_refusal(without) is None  # the sweep run without it


# ---- the run dir lock, and the relayout of resume ------------------------------------------------------------
@pytest.mark.parametrize("field", ["hydra.run.dir", "hydra.sweep.dir"])
def test_a_run_dir_in_use_is_followed(field: str, tmp_path: Path) -> None:
    """"Wait for it to end, or give another <field>": another dir locks; once the holder ends, the dir locks."""
    (tmp_path / "run").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    holder = lock_run_dir(tmp_path / "run", field)
    refused = refused_by(lambda: lock_run_dir(tmp_path / "run", field))
    assert refused and f"Wait for it to end, or give another {field}" in refused.message, refused
    assert f"pid {__import__('os').getpid()}" in refused.message
    release(lock_run_dir(tmp_path / "other", field))  # another dir
    release(holder)  # it ends
    release(lock_run_dir(tmp_path / "run", field))


def test_a_checkpoint_without_batch_counters_is_followed() -> None:
    """A checkpoint whose Lightning keeps no batch counters, resumed on another layout: "resume with the checkpoint's
    N rank(s) x data.batch_size=B" does what it says (the counters stay as they are)."""
    checkpoint = {"TokenDataModule": {"layout": {"world_size": 2, "batch_size": 8, "accumulate": 1}}}

    def trainer(world: int, batch: int) -> SimpleNamespace:
        datamodule = type("TokenDataModule", (), {"batch_size": batch})()
        return SimpleNamespace(world_size=world, accumulate_grad_batches=1, datamodule=datamodule)

    refused = refused_by(lambda: relayout.relayout_loops(dict(checkpoint), trainer(1, 8)))
    assert refused, "not refused"
    found = re.search(r"checkpoint's (\d+) rank\(s\) x data\.batch_size=(\d+)", refused.message)
    assert found, refused.message
    assert refused_by(lambda: relayout.relayout_loops(dict(checkpoint), trainer(int(found[1]), int(found[2])))) \
        is None


# ---- which raises the cases reach ------------------------------------------------------------------------------
UNREACHED = {
    ("runs/one_run.py", "lies in the checkpoints/ dir of the run"): "a run dir inside a run's checkpoints/: "
        "tests/test_one_run_per_dir.py checks, for each resume, that it names that run's own dir with resume=auto",
    ("runs/one_run.py", "holds other runs"): "a dir of several runs: tests/test_one_run_per_dir.py follows its ways "
                                             "out (a new hydra.run.dir, that run's own dir with resume=auto)",
    ("runs/write_targets.py", "is a file, not a directory"): "export_hf.py, its one caller, refuses a file as `out` "
                                                             "first (config/ranges.writable_dir)",
    ("report/runs.py", 'f"{path} is missing"'): "read_job catches it (the report names the job's unknown cost); "
                                                 "lr_report.common_cap refuses in its own words when no job is read",
    ("report/runs.py", "is not one of {', '.join(X_AXES)}"): "only from Python: ablation_report.py's argparse "
                                                              "choices refuse --x first (followed above)",
    ("report/runs.py", "is not one of {', '.join(BANDS)}"): "only from Python: argparse's choices refuse --band first",
    ("report/runs.py", "--test {test} --correction {correction}"): "only from Python: argparse's choices refuse --test "
                                                                  "and --correction first",
    ("launch/hydra_callbacks.py", "is chosen twice on the command line"): "a group chosen twice: "
        "test_fused.py::test_a_group_chosen_twice_is_one_line_naming_both asserts the line and that nothing is written",
    ("report/logged_scalars.py", "reading them needs the mlflow"): "a job logged to MLflow, read without mlflow "
                                                                   "installed (it is installed here)",
    ("report/logged_scalars.py", "W&B online only"): "test_loggers.py asserts the line and the logger it names",
    ("report/logged_scalars.py", "is not a W&B run file this report knows"): "a W&B run file of another format "
                                                                             "(none can be made offline here)",
}


def test_every_raise_of_the_runs_area_is_reached_by_a_case(tmp_path: Path) -> None:
    """A refusal added to a module of this area without a case here (or in UNREACHED, with why) fails this test."""
    REACHED.clear()
    for i, build in enumerate(REPORT_CASES.values()):
        case = build(tmp_path / str(i))
        script_refusal(case.script, case.argv)
    test_a_repeated_swept_value_is_followed(tmp_path / "repeat")
    test_a_sweep_launched_into_another_sweeps_dir_is_followed(tmp_path / "another")
    test_a_job_dir_of_another_config_is_followed(tmp_path / "job")
    test_an_experiments_sweep_without_m_is_followed(tmp_path / "single")
    for command in LAUNCHER_CASES:
        launcher_refusal(command)
    for command in FUSED_CASES:
        fused_refusal(command)
    test_a_run_dir_in_use_is_followed("hydra.run.dir", tmp_path / "lock")
    test_a_checkpoint_without_batch_counters_is_followed()
    test_an_export_into_a_file_or_a_dir_of_the_users_files_is_followed(tmp_path / "export")
    missing = unreached(REACHED, UNREACHED, ways_out.AREAS[Path(__file__).name])
    assert not missing, "raises no case reaches:\n" + "\n".join(missing)


# ---- item 3: a bad argument of the report scripts is one line, exit 2, nothing written ------------------------
@pytest.mark.parametrize("script,argv", [
    ("mup_transfer_plot.py", ()), ("mup_transfer_plot.py", ("{sweep}", "--bogus")),
    ("ablation_report.py", ("{sweep}", "--alpha", "small")), ("ablation_report.py", ("{sweep}", "--boot")),
    ("ablation_report.py", ("{sweep}", "--x", "bogus")),
], ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_a_bad_argument_of_a_report_is_one_line_and_writes_nothing(script: str, argv: tuple, tmp_path: Path,
                                                                   capsys) -> None:
    sweep = ablation_sweep(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    with mock.patch.object(sys, "argv", [f"scripts/{script}", *(a.format(sweep=sweep) for a in argv)]), \
            pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / script), run_name="__main__")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("gptlab: error: ") and len(err.splitlines()) == 1, err
    assert "--help" in err or "e.g. --" in err, err  # the script's options, or a value that works
    assert sorted(p for p in tmp_path.rglob("*")) == before


# ---- the export's write target (runs/write_targets.check_new_dir) ----------------------------------------------
def export_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What `python scripts/export_hf.py <command>` refuses; None: it exported."""
    main = runpy.run_path(str(ROOT / "scripts" / "export_hf.py"), run_name="gptlab_ways_out")["main"]
    cfg = ways_out.compose_config(list(command), config_name="export_hf")
    with contextlib.redirect_stdout(io.StringIO()):
        return refused_by(lambda: main.__wrapped__.__wrapped__(cfg))  # inside gptlab's hydra main, user_errors_exit


def test_an_export_into_a_file_or_a_dir_of_the_users_files_is_followed(tmp_path: Path) -> None:
    """"choose a new or empty directory, or pass overwrite=true": each done, the export is written, and the user's
    own files stay as they were."""
    ckpt = f"ckpt_path={ways_out.tiny_checkpoint()}"
    (tmp_path / "mine").mkdir(parents=True)
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert export_refusal((ckpt, f"out={tmp_path / 'exported'}")) is None
    assert (tmp_path / "exported" / "config.json").is_file()
    into_mine = (ckpt, f"out={tmp_path / 'mine'}")
    refused = export_refusal(into_mine)
    assert refused and "choose a new or empty directory, or pass overwrite=true" in refused.message, refused
    assert export_refusal((*into_mine, "overwrite=true")) is None  # typed by hand: ways_out knows no export key
    assert (tmp_path / "mine" / "config.json").is_file()
    assert export_refusal((ckpt, f"out={tmp_path / 'new'}")) is None
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
