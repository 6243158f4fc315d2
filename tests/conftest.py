"""Shared test helpers: the repo's paths and a Hydra compose of the real configs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"
TRAIN_SCRIPT = ROOT / "src" / "train.py"

# Small enough that a few dozen steps take seconds on a 2-core CPU.
TINY_MODEL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32"]
TINY_RUN = TINY_MODEL + [
    "data.batch_size=8",
    "trainer.accelerator=cpu",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
]


@pytest.fixture
def compose_train():
    """Compose conf/train.yaml with overrides, as `python src/train.py` would, with a run dir in tmp."""

    def _compose(overrides: list[str], output_dir: Path):
        GlobalHydra.instance().clear()
        # The compose API creates no run dir: point the job's output dir at the test's tmp dir.
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="train", overrides=[*overrides, f"paths.output_dir={output_dir}"])

    yield _compose
    GlobalHydra.instance().clear()


def run_train(args: list[str], cwd: Path, timeout: int = 300, threads: int | None = None) -> subprocess.CompletedProcess:
    """`python src/train.py args` in `cwd`; `threads` caps torch's threads (e.g. 1 per DDP rank on 2 cores).

    PYTHONPATH points at this checkout so processes that do not start from src/train.py (submitit's
    workers) import this gptlab, not another installed copy."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
