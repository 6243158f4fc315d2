"""Every helper the tests share: the repo's paths, tiny run settings, Hydra compose of the real configs, running
the entry scripts in subprocesses, fault-injecting callbacks (named by `+callbacks.x._target_=helpers.X`, so tests/
goes on PYTHONPATH), a TensorBoard reader and a small corpus writer. conftest.py holds only fixtures."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import gptlab.config  # noqa: F401  (registers the schemas that conf/ names)

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
CONF_DIR = ROOT / "conf"
TRAIN_SCRIPT = ROOT / "src" / "train.py"

# For subprocesses: import this checkout's gptlab (and these helpers), also in processes that do not start from
# a script in src/ (submitit's workers, scripts/), even where another copy of gptlab is installed.
CHECKOUT_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    filter(None, [str(ROOT / "src"), str(TESTS), os.environ.get("PYTHONPATH")]))}

# Every subprocess a test starts gets this long before it counts as hung: a guard against hangs, never a speed limit,
# and generous enough for a 2-core machine under load. pytest-timeout (pyproject) guards each test as a whole.
HANG_GUARD_S = 1500

# Small enough that a few dozen steps take seconds on a 2-core CPU.
TINY_MODEL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32"]
TINY_RUN = TINY_MODEL + [
    "data.batch_size=8",
    "trainer.accelerator=cpu",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
]
# TINY_RUN with every scalar logged each step and short validations and samples: one subprocess run takes a few
# seconds on a shared CPU.
TINY = TINY_MODEL + [
    "data.batch_size=4",
    "trainer.accelerator=cpu",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=2",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
    "callbacks.throughput.window_size=2",
    "callbacks.text_samples.max_new_tokens=8",
]


def compose_config(overrides: list[str], output_dir: Path | None = None, config_name: str = "train") -> DictConfig:
    """Compose conf/<config_name>.yaml with overrides, as its entry script would. The compose API creates no
    run dir: give `output_dir` for configs whose paths.output_dir is the run dir (train)."""
    if output_dir is not None:
        overrides = [*overrides, f"paths.output_dir={output_dir}"]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def compose_tiny(run_dir: Path, *overrides: str) -> DictConfig:
    """The config `python src/train.py` would see for a TINY run, with the run dir set directly."""
    return compose_config([*TINY, *overrides], run_dir)


class Zygote:
    """The client of tests/forkserver.py: one zygote per pytest worker, started at its first run, that forks each
    `python <script> args` instead of starting an interpreter (the imports were most of a subprocess's time)."""

    def __init__(self, root: Path = ROOT, env: dict[str, str] | None = None) -> None:
        """`root` and `env`: the checkout whose gptlab the zygote imports (another one than this: the README test's
        fresh copy) and its environment."""
        self.server: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.root, self.env = root, env or CHECKOUT_ENV

    def close(self) -> None:
        """Ends the zygote (it ends when its stdin closes); one started again on the next run."""
        if self.server is not None:
            self.server.stdin.close()
            self.server.wait(timeout=HANG_GUARD_S)
            self.server = None

    def usable(self) -> bool:
        return os.environ.get("GPTLAB_TEST_FORKSERVER", "1") != "0" and hasattr(os, "fork")

    def _start(self) -> subprocess.Popen:
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen([sys.executable, str(TESTS / "forkserver.py")], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, cwd=self.root, env=self.env)
            assert "ready" in json.loads(self.server.stdout.readline() or '{"died": 1}'), "the test zygote died"
        return self.server

    def _fork(self, argv: list[str], cwd: Path, env: dict[str, str], out: Path, err: Path) -> tuple[Any, int]:
        """Asks the zygote (with self.lock held) to fork `argv`; returns the server and the child's pid."""
        server = self._start()
        what = {"module": argv[2], "args": argv[3:]} if argv[1] == "-m" else {"script": argv[1], "args": argv[2:]}
        server.stdin.write(json.dumps({**what, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err)}) + "\n")
        server.stdin.flush()
        return server, json.loads(server.stdout.readline())["pid"]

    def run(self, argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
        import tempfile

        with self.lock, tempfile.TemporaryDirectory(prefix="zygote-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            server, pid = self._fork(argv, cwd, env, out, err)
            killed: list[int] = []
            guard = threading.Timer(HANG_GUARD_S, lambda: killed.append(_kill_group(pid)))
            guard.start()
            try:
                status = json.loads(server.stdout.readline())["status"]
            finally:
                guard.cancel()
            code = os.waitstatus_to_exitcode(status)
            stdout, stderr = (path.read_text(errors="replace") if path.exists() else "" for path in (out, err))
            if killed:
                raise subprocess.TimeoutExpired(argv, HANG_GUARD_S, stdout, stderr)
            return subprocess.CompletedProcess(argv, code, stdout, stderr)

    def popen(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> ZygoteProcess:
        """`python <script> args` in the background, stdout and stderr in `log`. The zygote serves one run at a
        time: this one holds it until it ends."""
        self.lock.acquire()
        try:
            server, pid = self._fork(argv, cwd, env, log, log)
        except BaseException:
            self.lock.release()
            raise
        return ZygoteProcess(argv, pid, server, self.lock)


class ZygoteProcess:
    """A subprocess.Popen-like handle on a zygote's child, for the drills (gptlab.tools.drill_launch): the child is
    the zygote's, which reaps it and reports its status; a thread here collects that and frees the zygote."""

    def __init__(self, argv: list[str], pid: int, server: subprocess.Popen, lock: threading.Lock) -> None:
        self.args, self.pid, self.returncode = argv, pid, None
        self._ended = threading.Event()

        def collect() -> None:
            guard = threading.Timer(HANG_GUARD_S, _kill_group, (pid,))
            guard.daemon = True
            guard.start()
            try:
                line = server.stdout.readline()
                self.returncode = os.waitstatus_to_exitcode(json.loads(line)["status"]) if line else 255
            finally:
                guard.cancel()
                self._ended.set()
                lock.release()

        threading.Thread(target=collect, daemon=True).start()

    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if not self._ended.is_set():
            os.kill(self.pid, signum)


def drill_launch(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> Any:
    """The drills' launch for tests: the job forked from the worker's zygote (gptlab.tools.drill_launch)."""
    from gptlab.tools.drill_launch import start_job

    return ZYGOTE.popen(cmd, cwd, env, log) if ZYGOTE.usable() else start_job(cmd, cwd, env, log)


def _kill_group(pid: int) -> int:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return pid


ZYGOTE = Zygote()


def run_script(script: str, args: list[str], cwd: Path = ROOT, threads: int | None = None,
               check: bool = False) -> subprocess.CompletedProcess:
    """`python <script> args` (a path relative to the checkout, e.g. src/train.py or scripts/plan.py) in `cwd`;
    `threads` caps torch's threads (e.g. 1 per DDP rank on 2 cores); `check` fails the test on a non-zero exit."""
    env = dict(CHECKOUT_ENV)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = run_python([sys.executable, str(ROOT / script), *args], Path(cwd), env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def run_python(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python <script> args` (or `python -m module args`) with its output captured: forked from the worker's zygote
    where it runs, else a fresh interpreter (GPTLAB_TEST_FORKSERVER=0)."""
    if ZYGOTE.usable():
        return ZYGOTE.run(argv, cwd, env)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)


def run_train(args: list[str], cwd: Path = ROOT, **kwargs: Any) -> subprocess.CompletedProcess:
    return run_script("src/train.py", args, cwd, **kwargs)


def run_tiny(run_dir: Path, *overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    """A TINY training run in a subprocess, into `run_dir`."""
    return run_train([f"hydra.run.dir={run_dir}", *TINY, *overrides], check=check)


def train_in_process(run_dir: Path, *overrides: str) -> float | None:
    """A TINY run without the subprocess's ~10 s of imports; for the runs that need no signal."""
    from gptlab.apps.train import train

    return train(compose_tiny(run_dir, *overrides))


def scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} over every event file of the run, later files (a resumed run) winning."""
    out: dict[str, dict[int, float]] = {}
    from gptlab.runs.run_dir import event_files

    for path in event_files(run_dir):
        acc = EventAccumulator(str(path))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def scalar_steps(run_dir: Path, tag: str) -> list[int]:
    """The step of every `tag` event in the run's event files, repeats kept (scalars() keeps a step's last)."""
    from gptlab.runs.run_dir import event_files

    steps = []
    for path in event_files(run_dir):
        acc = EventAccumulator(str(path))
        acc.Reload()
        steps += [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []
    return steps


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


class KillAtStep(L.Callback):
    """Sends this process `signal_name` as optimizer step `step` begins, i.e. while that step is computed."""

    def __init__(self, step: int, signal_name: str = "SIGKILL") -> None:
        self.step, self.signum = step, getattr(signal, signal_name)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class SignalInValidation(L.Callback):
    """Sends this process `signal_name` as batch `batch` of the validation at optimizer step `step` begins (of the
    sanity check with sanity=true): aimed by the event, never by the clock."""

    def __init__(self, step: int, batch: int = 0, signal_name: str = "SIGTERM", sanity: bool = False) -> None:
        self.step, self.batch, self.signum, self.sanity = step, batch, getattr(signal, signal_name), sanity
        self.sent = False

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        aimed = (trainer.global_step, batch_idx, trainer.sanity_checking) == (self.step, self.batch, self.sanity)
        if aimed and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


class SignalAtStart(L.Callback):
    """Sends its own process `signal_name` when built (before the data is set up and training starts), in DDP rank
    `rank` only (ranks > 0 are told theirs by LOCAL_RANK; rank 0, the launcher, has none yet)."""

    def __init__(self, rank: int, signal_name: str = "SIGTERM") -> None:
        if int(os.environ.get("LOCAL_RANK", "0")) == rank:
            os.kill(os.getpid(), getattr(signal, signal_name))


class InjectNaN(L.Callback):
    """Turns one weight into NaN just before the batch of optimizer step `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.tok_emb.weight[0, 0] = float("nan")


def write_corpus(directory: Path, n_files: int = 2, docs_per_file: int = 150, seed: int = 0) -> list[Path]:
    """Small JSONL files of made-up documents (some non-ASCII), deterministic for a seed."""
    rng = random.Random(seed)
    words = "the of model token layer attention café naïve 東京 data train loss value, step. (x) {y}\n".split(" ")
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(n_files):
        path = directory / f"part{f}.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for d in range(docs_per_file):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 120)))
                out.write(json.dumps({"id": f"{f}-{d}", "text": f"doc {f}-{d}: {text}"}) + "\n")
        paths.append(path)
    return paths


class FillDisk(L.Callback):
    """As optimizer step `step` begins, leaves the run dir's filesystem nearly full, as another job on a shared disk
    would: a real small filesystem (`simulate=False`, e.g. a tmpfs) gets a filler file; otherwise every later write
    of a checkpoint's bytes fails with ENOSPC. Removing `<run dir>/filler` (or simulate) frees the space again."""

    def __init__(self, step: int, filler: str, simulate: bool = False) -> None:
        self.step, self.filler, self.simulate = step, Path(filler), simulate

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != self.step:
            return
        if self.simulate:
            import errno

            def no_space(obj: Any, f: Any) -> None:  # this process only: the next run has its space back
                f.write(b"PK\x03\x04 half a checkpoint")
                raise OSError(errno.ENOSPC, "No space left on device")

            torch.save = no_space
            return
        with open(self.filler, "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
            try:
                while True:
                    f.write(b"\0" * (1 << 12))
            except OSError:
                pass


class KillAfterCheckpoint(L.Callback):
    """SIGKILLs this process the moment the checkpoint written after optimizer step `step` is renamed into place:
    saved, but the step's own metrics (which Lightning logs after the checkpoint callbacks) not yet logged."""

    def __init__(self, step: int) -> None:
        self.step = step

    def setup(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        real_replace = os.replace

        def replace_then_die(src: Any, dst: Any) -> None:
            real_replace(src, dst)
            if str(dst).endswith(".ckpt") and trainer.global_step == self.step:
                os.kill(os.getpid(), signal.SIGKILL)

        os.replace = replace_then_die


class KillSweepJobOnce(L.Callback):
    """SIGKILLs this process (the whole sweep, as a lost node would; or sends it `signal_name`, as a scheduler's
    preemption would) as optimizer step `step` of sweep job number `job` begins, the first time only: `marker` is
    created before the signal, so the same command launched again runs on."""

    def __init__(self, job: int, step: int, marker: str, signal_name: str = "SIGKILL") -> None:
        self.job, self.step, self.marker, self.signum = job, step, Path(marker), getattr(signal, signal_name)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        # the marker first: a job resumed as a plain run (tests/test_fused.py) has no hydra.job.num
        if not self.marker.exists() and trainer.global_step == self.step and HydraConfig.get().job.num == self.job:
            self.marker.touch()
            os.kill(os.getpid(), self.signum)


class PauseAtStep(L.Callback):
    """As optimizer step `step` begins, creates `paused` and waits (up to an hour) until `resume` exists: a run
    held mid-training, with its run dir set up, for tests of what another process may do meanwhile."""

    def __init__(self, step: int, paused: str, resume: str) -> None:
        self.step, self.paused, self.resume = step, Path(paused), Path(resume)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        import time

        if trainer.global_step != self.step:
            return
        self.paused.touch()
        deadline = time.monotonic() + 3600
        while not self.resume.exists() and time.monotonic() < deadline:
            time.sleep(0.1)


class RecordBatches(L.Callback):
    """Saves the input ids of every training micro-batch, {global step: [(B, T) tensors]}, to `path` after each
    (a resumed run adds to the file the interrupted one left). `per_rank`: each rank its own `path`.rank<r>."""

    def __init__(self, path: str, per_rank: bool = False) -> None:
        self.path, self.per_rank = Path(path), per_rank

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, *args: Any) -> None:
        path = self.path.with_name(f"{self.path.name}.rank{trainer.global_rank}") if self.per_rank else self.path
        seen = torch.load(path) if path.exists() else {}
        seen.setdefault(trainer.global_step, []).append(batch[0].cpu())
        torch.save(seen, path)


class RecordShards(L.Callback):
    """For trainer=fsdp: each rank's local and global size of every parameter at the start of training, and the
    (sharded) model's logits on PROBE_IDS at the end, saved to `path`.rank<r> (every rank runs the forward: FSDP
    gathers each block with collectives)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.record: dict[str, Any] = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.record["sizes"] = {name: (p.to_local().numel() if hasattr(p, "to_local") else p.numel(), p.numel())
                                for name, p in pl_module.model.named_parameters()}
        # nn.Module.compile() (in place) sets this private attribute; per-block compile is what it shows
        self.record["compiled_blocks"] = [block._compiled_call_impl is not None for block in pl_module.model.blocks]

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.model.eval()
        with torch.no_grad():
            self.record["logits"] = pl_module.model(PROBE_IDS.to(pl_module.device)).float().cpu()
        torch.save(self.record, self.path.with_name(f"{self.path.name}.rank{trainer.global_rank}"))


PROBE_IDS = torch.arange(24).view(2, 12) * 7 % 250  # a fixed input for comparing a model's logits across forms


class RecordPeakMemory(L.Callback):
    """Writes torch.cuda.max_memory_allocated() over the training steps to `path` (JSON) at the end of training."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        torch.cuda.reset_peak_memory_stats()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.path.write_text(json.dumps({"peak_bytes": torch.cuda.max_memory_allocated()}))


class PauseUntilSignalled(L.Callback):
    """As optimizer step `step` begins, creates `paused` and waits (up to an hour) until this process has recorded a
    signal (gptlab.signals.FLAG; a Ctrl-C passed on by the fused launcher too): a run held inside a step, signalled
    there by the test, aimed by the event, never by the clock."""

    def __init__(self, step: int, paused: str) -> None:
        self.step, self.paused = step, Path(paused)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        import time

        from gptlab.signals import FLAG

        if trainer.global_step != self.step:
            return
        self.paused.touch()
        deadline = time.monotonic() + 3600
        while not FLAG.signum and time.monotonic() < deadline:
            time.sleep(0.05)
