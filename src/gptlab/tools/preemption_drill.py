"""The DDP preemption drill behind scripts/preemption_drill.py: start a 2-rank CPU job again and again, signal one
rank, the other or both at a chosen moment (mid-step, mid-validation, mid-sample generation, mid-checkpoint, mid
zero-shot evaluation, or at a random time from the launch on, imports included), and check how the job ends.

A preempted job must end every rank within `deadline` seconds of the signal, with exit code 128 + the signal
number, one `gptlab: preempted ...` line saying how to resume, no traceback, and a `last.ckpt` that loads and
holds the step the line names; a signal at a random time that lands before the first step (still tokenizing, say)
may instead end every rank with one `gptlab: stopped: ... before training started` line, nothing to save. Two more
cases: SIGKILL of rank 1 (a lost rank) and a NaN loss on rank 1 only, each of which must end the job with exit code
1 and one gptlab message naming the rank and the step.

The moments are aimed from inside the job by `SignalAt`, a callback the drill adds to rank 0 (the launcher: the
other ranks are its child processes), so "mid-checkpoint" really is while rank 0 is in a checkpoint write.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import lightning as L
import torch

from gptlab.checkpoint.reader import read_checkpoint
from gptlab.tools.drill_launch import Launch, start_job
from gptlab.tools.fault_drill import REPO, RUN_OVERRIDES, TRAIN

MOMENTS = ("step", "validation", "sample", "checkpoint", "zero_shot", "anytime")
TARGETS = ("rank0", "rank1", "all")
RECORD = "drill_signal.json"  # what SignalAt sent, when, at which step: in the run dir
CHECKPOINT_EVERY = 4
VAL_EVERY = 6
ANYTIME_WINDOW = 15.0  # seconds after launch an "anytime" signal is sent within
HANG_GUARD_SECONDS = 1500.0  # a job still running this long after launch is hung (never a speed limit)
MAX_STEPS = 200  # far more than any aimed step: a job that ignored its signal would run on, and be seen doing so
RUN = [*RUN_OVERRIDES, "trainer=ddp", "trainer.devices=2", f"trainer.max_steps={MAX_STEPS}",
       f"trainer.val_check_interval={VAL_EVERY}", "trainer.limit_val_batches=4",
       f"callbacks.periodic_checkpoint.every_n_train_steps={CHECKPOINT_EVERY}",
       "callbacks.text_samples.max_new_tokens=48"]
# The "zero_shot" moment's jobs score 3 batches of a small LAMBADA-like file every 2 steps (rank 0 alone).
ZERO_SHOT = ["callbacks.zero_shot.tasks=[lambada]", "callbacks.zero_shot.every_n_steps=2",
             "callbacks.zero_shot.limit=5", "callbacks.zero_shot.batch_size=2"]
ZERO_SHOT_TEXTS = [f"On day {i} the keeper climbed the stairs to light the lamp for the ships" for i in range(5)]


def rank_pids(launcher: int) -> dict[int, int]:
    """local rank -> pid of the DDP ranks Lightning started from `launcher` (rank 0 itself included), found by the
    LOCAL_RANK in each child's environment (DataLoader workers, also children, are left out)."""
    pids = {0: launcher}
    try:
        children = " ".join(p.read_text() for p in Path(f"/proc/{launcher}/task").glob("*/children")).split()
    except OSError:
        return pids
    for child in map(int, children):
        try:
            env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = next((int(v.split(b"=", 1)[1]) for v in env if v.startswith(b"LOCAL_RANK=")), None)
        if rank:
            pids[rank] = child
    return pids


def target_pids(target: str, pids: dict[int, int]) -> list[int]:
    return {"rank0": [pids[0]], "rank1": [pids[1]] if 1 in pids else [], "all": sorted(pids.values())}[target]


class SignalAt(L.Callback):
    """In rank 0: at `moment` of the first optimizer step >= `after_step`, sends `signal_name` to the `target` ranks
    (once) and records what it sent in the run dir. Moments: "step" (between forward and backward), "validation"
    (a validation batch), "sample" (a text-sample generation), "checkpoint" (a checkpoint write), "zero_shot" (the
    second scoring batch of a callbacks.zero_shot evaluation)."""

    def __init__(self, moment: str, after_step: int, target: str, signal_name: str, record: str) -> None:
        self.moment, self.after_step, self.target = moment, after_step, target
        self.signum, self.record, self.sent = getattr(signal, signal_name), Path(record), False

    def _fire(self, trainer: L.Trainer) -> None:
        if self.sent or trainer.global_step < self.after_step or trainer.sanity_checking:
            return
        self.sent = True
        pids = target_pids(self.target, rank_pids(os.getpid()))
        self.record.write_text(json.dumps({"time": time.time(), "step": trainer.global_step, "pids": pids}))
        for pid in pids:
            os.kill(pid, self.signum)

    def _wrap(self, owner: Any, name: str, trainer: L.Trainer) -> None:
        inner: Callable = getattr(owner, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._fire(trainer)
            return inner(*args, **kwargs)

        setattr(owner, name, wrapped)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.global_rank != 0:
            return
        if self.moment == "sample":
            self._wrap(pl_module.model, "generate", trainer)
        elif self.moment == "checkpoint":
            self._wrap(trainer.strategy.checkpoint_io, "save_checkpoint", trainer)
        elif self.moment == "zero_shot":
            self._wrap_scoring(trainer)

    def _wrap_scoring(self, trainer: L.Trainer) -> None:
        from gptlab.eval import scoring

        inner = scoring.score_pairs

        def score_pairs(model: Any, pairs: Any, batch_size: int = 16, before_batch: Any = None) -> Any:
            batches = [0]

            def hook() -> None:
                batches[0] += 1
                if batches[0] == 2:
                    self._fire(trainer)
                if before_batch is not None:
                    before_batch()

            return inner(model, pairs, batch_size, hook)

        scoring.score_pairs = score_pairs

    def on_before_backward(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_rank == 0 and self.moment == "step":
            self._fire(trainer)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_rank == 0 and self.moment == "validation":
            self._fire(trainer)


class NaNOnRank(L.Callback):
    """Turns one weight of `rank`'s replica into NaN when `step` optimizer steps are done: a fault on one rank only."""

    def __init__(self, step: int, rank: int) -> None:
        self.step, self.rank = step, rank

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            with torch.no_grad():
                pl_module.model.tok_emb.weight[0, 0] = float("nan")


@dataclass
class Case:
    kind: str  # "preempt", "lost" (SIGKILL of rank 1) or "nan" (NaN on rank 1)
    target: str = "rank1"
    moment: str = "step"
    signal_name: str = "SIGTERM"
    step: int = 5  # the first optimizer step the moment may be taken at

    def label(self) -> str:
        if self.kind == "lost":
            return f"SIGKILL to {self.target}, {self.moment} >= {self.step}"
        if self.kind == "nan":
            return f"NaN on rank1 in step {self.step + 1}"
        at = "at a random time from launch" if self.moment == "anytime" else f"{self.moment} >= {self.step}"
        return f"{self.signal_name} to {self.target}, {at}"


@dataclass
class Outcome:
    case: Case
    returncode: Optional[int] = None
    seconds: Optional[float] = None  # from the signal (or the fault's step) to the end of every rank
    detail: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


class PreemptionDrill:
    def __init__(self, root: Path, deadline: float, seed: int, launch: Launch = start_job) -> None:
        self.root, self.deadline, self.rng, self.launch = root, deadline, random.Random(seed), launch
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
        self.runs = 0

    def overrides(self, case: Case, run_dir: Path) -> list[str]:
        if case.kind == "nan":
            return [f"+callbacks.drill._target_={__name__}.NaNOnRank", f"+callbacks.drill.step={case.step}",
                    "+callbacks.drill.rank=1"]
        if case.moment == "anytime":
            return []
        if case.moment == "zero_shot":
            lambada = self.root / "lambada.jsonl"
            lambada.write_text("".join(json.dumps({"text": text}) + "\n" for text in ZERO_SHOT_TEXTS))
            extra = [*ZERO_SHOT, f"callbacks.zero_shot.data.lambada={lambada}"]
        else:
            extra = []
        signal_name = "SIGKILL" if case.kind == "lost" else case.signal_name
        return [f"+callbacks.drill._target_={__name__}.SignalAt", f"+callbacks.drill.moment={case.moment}",
                f"+callbacks.drill.after_step={case.step}", f"+callbacks.drill.target={case.target}",
                f"+callbacks.drill.signal_name={signal_name}", f"+callbacks.drill.record={run_dir / RECORD}", *extra]

    def run(self, case: Case) -> Outcome:
        self.runs += 1
        run_dir = self.root / f"run{self.runs:03d}"
        log_path = self.root / f"run{self.runs:03d}.log"
        cmd = [sys.executable, str(TRAIN), f"hydra.run.dir={run_dir}", *RUN, *self.overrides(case, run_dir)]
        outcome = Outcome(case)
        proc = self.launch(cmd, REPO, self.env, log_path)
        sent_at, ranks = self._watch(proc, case, run_dir)
        ended = time.time()
        text = log_path.read_text(errors="replace")
        outcome.returncode = proc.returncode
        record = run_dir / RECORD
        if case.kind != "nan" and case.moment != "anytime" and record.is_file():
            sent_at = json.loads(record.read_text())["time"]
        if sent_at is not None:
            outcome.seconds = ended - sent_at
        self._check(outcome, text, run_dir, ranks, log_path)
        return outcome

    def _watch(self, proc: Any, case: Case, run_dir: Path) -> tuple[Optional[float], set[int]]:
        """Waits for the job (sending the signal itself for "anytime" cases); kills it if it outlives the deadline.
        Returns when the signal was sent (None: not known here) and every rank pid seen."""
        started, ranks, sent_at = time.time(), {proc.pid}, None
        # Launch and imports take ~5-10 s here, training 200 steps ~20 s more: the window covers both.
        fire_at = started + self.rng.uniform(0.0, ANYTIME_WINDOW) if case.moment == "anytime" else None
        # A hang guard, not a limit: launch and training up to the aimed step take what the machine's load makes
        # them (minutes at load 8 on 2 cores); the property measured is the deadline from the signal, below.
        hard_stop = started + HANG_GUARD_SECONDS
        while proc.poll() is None:
            pids = rank_pids(proc.pid)
            ranks.update(pids.values())
            now = time.time()
            if fire_at is not None and sent_at is None and now >= fire_at:
                targets = target_pids(case.target, pids)
                if targets:  # rank 1 not started yet: keep waiting for it, it is still "during start-up"
                    for pid in targets:
                        os.kill(pid, getattr(signal, case.signal_name))
                    sent_at = now
            record = run_dir / RECORD
            if sent_at is None and record.is_file():
                try:
                    sent_at = json.loads(record.read_text())["time"]
                except ValueError:
                    pass  # being written
            if (sent_at is not None and now - sent_at > self.deadline + 30) or now > hard_stop:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.05)
        return sent_at, ranks

    def _check(self, out: Outcome, text: str, run_dir: Path, ranks: set[int], log_path: Path) -> None:
        case, problems = out.case, out.problems
        deadline = time.time() + 120  # a hang guard: the job has ended, its ranks exit as the machine lets them
        while any(_alive(pid) for pid in ranks) and time.time() < deadline:
            time.sleep(0.1)
        survivors = [pid for pid in ranks if _alive(pid)]
        if survivors:
            problems.append(f"ranks still running after the job ended: {survivors}")
            for pid in survivors:
                os.kill(pid, signal.SIGKILL)
        if "Traceback" in text:
            problems.append("a traceback was printed")
        if out.seconds is not None and out.seconds > self.deadline:
            problems.append(f"took {out.seconds:.1f} s > {self.deadline:.0f} s")
        stops = [line for line in text.splitlines()
                 if re.match(r"gptlab: (preempted|stopped|rank \d|training stopped|lost contact)", line)]
        if len(stops) != 1:
            problems.append(f"{len(stops)} stop messages instead of one: {stops[:3]}")
        message = stops[0] if stops else ""
        out.detail = message[len("gptlab: "):][:110]
        if case.kind == "preempt":
            self._check_preempted(out, message, run_dir)
        elif case.kind == "lost":
            if out.returncode != 1 or not re.search(r"rank 1 \(pid \d+\) was killed by SIGKILL at step \d+", message):
                problems.append(f"exit {out.returncode}, expected 1 with a message naming rank 1 and its step")
            for ckpt in sorted((run_dir / "checkpoints").glob("*.ckpt")):
                try:
                    read_checkpoint(ckpt, mmap=True)
                except Exception as err:  # noqa: BLE001 - any failure to load is the finding
                    problems.append(f"{ckpt.name} does not load: {err}")
        elif case.kind == "nan":
            if out.returncode != 1 or not re.search(rf"at step {case.step + 1} .*on rank 1 of 2", message):
                problems.append(f"exit {out.returncode}, expected 1 naming step {case.step + 1} on rank 1 of 2")
        if problems:
            problems.append(f"log: {log_path}")

    def _check_preempted(self, out: Outcome, message: str, run_dir: Path) -> None:
        signum = int(getattr(signal, out.case.signal_name))
        if out.returncode != 128 + signum:
            out.problems.append(f"exit {out.returncode}, expected {128 + signum}")
        if out.case.moment == "anytime" and re.match(
                r"gptlab: stopped: SIG\w+ while .*before training started.* run the same command again", message):
            return  # signalled before the first step: nothing to save, every rank stopped together
        match = re.search(r"at step (\d+); saved (\S+)\)\. Continue with: .*resume=auto hydra\.run\.dir=", message)
        if not match:
            out.problems.append("no line saying what was saved and how to resume")
            return
        try:
            saved = read_checkpoint(match.group(2), mmap=True)
        except Exception as err:  # noqa: BLE001 - any failure to load is the finding
            out.problems.append(f"the preemption checkpoint does not load: {err}")
            return
        if int(saved["global_step"]) != int(match.group(1)):
            out.problems.append(f"the preemption checkpoint holds step {saved['global_step']}, the message says "
                                f"{match.group(1)}")
        record = run_dir / RECORD
        if out.case.moment == "zero_shot" and record.is_file():  # the evaluation is cut, not finished plus a step
            sent = json.loads(record.read_text())["step"]
            if int(match.group(1)) != sent:
                out.problems.append(f"signalled in step {sent}'s zero-shot evaluation, stopped at step "
                                    f"{match.group(1)}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its exit status waits to be collected


def drill_cases(repeats: int, seed: int) -> list[Case]:
    """`repeats` SIGTERMs to rank 0 and as many to rank 1 (cycling through the moments), SIGUSR1 to all ranks at
    each moment, and one lost rank and one NaN on a rank; aimed steps drawn from `seed`."""
    rng = random.Random(seed)
    cases = []
    for i in range(repeats):
        for target in ("rank0", "rank1"):
            cases.append(Case("preempt", target, MOMENTS[(i + (target == "rank1")) % len(MOMENTS)], "SIGTERM",
                              rng.randint(1, 3 * VAL_EVERY)))
    cases += [Case("preempt", "all", moment, "SIGUSR1", rng.randint(1, 3 * VAL_EVERY)) for moment in MOMENTS]
    cases += [Case("lost", "rank1", "step", "SIGKILL", rng.randint(2, 12)), Case("nan", step=rng.randint(2, 12))]
    return cases


def run_preemption_drill(cases: list[Case], seed: int = 0, deadline: float = 60.0, workdir: Optional[Path] = None,
                         keep: bool = False, report: Callable[[Outcome], None] = lambda o: None,
                         launch: Launch = start_job) -> list[Outcome]:
    """Run `cases` one after another; `launch` starts each job (gptlab.tools.drill_launch)."""
    root = Path(tempfile.mkdtemp(prefix="preemption-drill-", dir=workdir))
    drill = PreemptionDrill(root, deadline, seed, launch)
    outcomes = []
    try:
        for case in cases:
            outcomes.append(drill.run(case))
            report(outcomes[-1])
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return outcomes


def outcome_row(out: Outcome) -> str:
    seconds = "-" if out.seconds is None else f"{out.seconds:5.1f} s"
    verdict = "ok" if out.passed else "FAIL: " + "; ".join(out.problems)
    return f"{out.case.label():<46} exit {out.returncode!s:>4}  {seconds:>7}  {verdict}  | {out.detail}"
