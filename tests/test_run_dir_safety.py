"""gptlab removes only what it created, and refuses what it can before creating anything (issue 25).

Each way a run dir comes to exist x each way a run fails early, with the real `python src/train.py` in a fresh
launch dir that holds a user's file: the launch dir (and a dir the user made) must hold exactly what it held before,
byte for byte, after the refusal. A data error happens after Hydra and gptlab have written the run's setup files,
so there gptlab removes them again and says so; a refusal from the config or the machine happens before anything
exists, so there is nothing to remove."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, TINY_RUN, TRAIN_SCRIPT, run_python

RUN = [*TINY_RUN, "trainer.max_steps=1", "scheduler.warmup_steps=0", "data.store=memory"]  # no warmup warning

# How the run dir comes to exist: (overrides, the user's dir that must stay as it was, or None).
DIR_KINDS = {
    "default": ([], None),  # outputs/runs/<name>/<date>/<time>, made by Hydra
    "dot": (["hydra.run.dir=."], None),  # the launch dir itself
    "fast_dev_run": (["debug=fast_dev_run"], None),  # hydra.run.dir=. from conf/debug/fast_dev_run.yaml
    "existing_empty": (["hydra.run.dir=mine"], "mine"),
    "existing_with_files": (["hydra.run.dir=mine"], "mine"),
    "sweep": (["-m", "hydra.sweep.dir=mine"], "mine"),  # a sweep into a dir the user made
}
# How the run fails early: (overrides, whether it fails before anything is created).
FAILURES = {
    "config": (["model.n_head=3"], True),  # n_embd=32 is not divisible by 3: GPTConfig refuses
    "ranks": (["tokenizer=gpt2"], True),  # no GPT-2 ranks on disk and no network (see _env)
    "ckpt_path": (["ckpt_path=missing.ckpt"], True),
    "data": (["data=text_files", "data.source.paths=[empty.txt]"], False),  # found empty once the data is read
}


def tree(root: Path) -> dict[str, str]:
    """Every path under `root` with its content hash ("dir" for a directory)."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def _env(tmp_path: Path) -> dict[str, str]:
    """The GPT-2 ranks are missing: no fetched file, an empty tiktoken cache, and any download fails at once
    (a proxy on a closed port) instead of waiting for DNS."""
    return {**CHECKOUT_ENV, "GPTLAB_RANKS_DIR": str(tmp_path / "no-ranks"), "TIKTOKEN_CACHE_DIR": str(tmp_path / "tc"),
            "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "OMP_NUM_THREADS": "1"}


def launch_dir_of_a_user(tmp_path: Path) -> Path:
    """A fresh launch dir holding a user's notes and an empty corpus file."""
    launch_dir = tmp_path / "launch"
    launch_dir.mkdir()
    (launch_dir / "notes.txt").write_text("the user's own file\n")
    (launch_dir / "empty.txt").write_text("")
    return launch_dir


def launch(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess:
    """`python src/train.py args` from tmp_path/launch (forked from the tests' zygote where it runs)."""
    return run_python([sys.executable, str(TRAIN_SCRIPT), *args], tmp_path / "launch", _env(tmp_path))


# What CI runs of the matrix (`-m slow` runs all 24 subprocesses): the removal path (a data failure, after files
# exist) in the launch dir itself and in a user's dir with files, the issue's own case (fast_dev_run's
# hydra.run.dir=. with missing GPT-2 ranks), and a config error in the default dir.
CI_CASES = {("default", "config"), ("dot", "data"), ("existing_with_files", "data"), ("fast_dev_run", "ranks"),
            ("sweep", "data")}


def _matrix() -> list:
    return [pytest.param(kind, failure, id=f"{kind}-{failure}",
                         marks=() if (kind, failure) in CI_CASES else pytest.mark.slow)
            for kind in DIR_KINDS for failure in FAILURES]


@pytest.mark.parametrize("kind,failure", _matrix())
def test_an_early_failure_leaves_the_users_dirs_as_they_were(tmp_path: Path, kind: str, failure: str) -> None:
    dir_args, user_dir = DIR_KINDS[kind]
    fail_args, before_anything = FAILURES[failure]
    launch_dir = launch_dir_of_a_user(tmp_path)
    if user_dir is not None:
        (launch_dir / user_dir).mkdir()
        if kind in ("existing_with_files", "sweep"):
            (launch_dir / user_dir / "results.csv").write_text("step,loss\n1,2.5\n")
            (launch_dir / user_dir / "data").mkdir()
            (launch_dir / user_dir / "data" / "x.bin").write_bytes(os.urandom(64))
    before = tree(launch_dir)

    proc = launch(tmp_path, [*RUN, *dir_args, *fail_args])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    after = tree(launch_dir)
    if kind == "sweep":  # a sweep job's dir keeps its record of the failure; everything the user had stays
        assert {k: v for k, v in after.items() if k in before} == before, out[-3000:]
        return
    assert proc.returncode == 2, out[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("gptlab: error: "), out[-3000:]
    assert after == before, f"{sorted(set(after) ^ set(before))}\n{out[-3000:]}"
    if before_anything or kind == "fast_dev_run":  # nothing was created, so nothing is removed or announced
        assert "gptlab: removed" not in out and "run dir " not in out, out[-3000:]
    else:
        removed = [line for line in proc.stderr.splitlines() if line.startswith("gptlab: removed ")]
        assert len(removed) == 1 and removed[0].endswith("created by this run before it stopped"), out[-3000:]
        if user_dir is not None or kind == "dot":  # a dir that existed stays: only the setup entries are named
            assert ".hydra" in removed[0] and "config_resolved.yaml" in removed[0], removed


# Refusals that depend only on the config and the machine: each before the run-dir line, the progress bar or any file.
REFUSALS = {
    "flex_on_cpu": (["model.attn_pattern=[local]", "model.attn_window=8", "model.attn_impl=flex"], "model.attn_impl"),
    "flash_on_cpu": (["model.attn_pattern=[local]", "model.attn_window=8", "model.attn_impl=flash"],
                     "model.attn_impl=flash needs a CUDA GPU"),
    "float8_on_cpu": (["runtime.float8=true"], "runtime.float8=true needs a CUDA GPU"),
    "devices": (["trainer.devices=64"], "trainer.devices=64"),
    "memory": (["data.batch_size=100000000"], "free RAM"),
    "resume_value": (["resume=always"], "resume="),
    "type": (["model.tie_weights=maybe"], "model.tie_weights"),
    "resume_and_ckpt_path": (["resume=auto", "ckpt_path=x.ckpt"], "ckpt_path"),
}


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refusal_from_the_config_or_machine_creates_nothing(tmp_path: Path, refusal: str) -> None:
    args, field = REFUSALS[refusal]
    run = [o for o in RUN if not o.startswith("callbacks.progress_bar")]  # the bar would start if training did
    launch_dir = launch_dir_of_a_user(tmp_path)
    before = tree(launch_dir)
    proc = launch(tmp_path, [*run, *args])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("gptlab: error: ") and field in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line: no banner, no bar, no traceback
    assert proc.stdout == "", proc.stdout
    assert tree(launch_dir) == before
