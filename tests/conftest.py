"""Shared test helpers: the repo's paths, a Hydra compose of the real configs, fixtures for data.

The Hugging Face hub is unreachable here: offline mode makes `datasets` fail at once instead of retrying for
half a minute, which is also what users get with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"
TRAIN_SCRIPT = ROOT / "src" / "train.py"

# For subprocesses: import this checkout's gptlab, also in processes that do not start from a script in
# src/ (submitit's workers, scripts/), even where another copy of gptlab is installed.
CHECKOUT_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}

# Small enough that a few dozen steps take seconds on a 2-core CPU.
TINY_MODEL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32"]
TINY_RUN = TINY_MODEL + [
    "data.batch_size=8",
    "trainer.accelerator=cpu",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
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


@pytest.fixture
def compose_train():
    return compose_config


def run_train(args: list[str], cwd: Path, timeout: int = 300, threads: int | None = None) -> subprocess.CompletedProcess:
    """`python src/train.py args` in `cwd`; `threads` caps torch's threads (e.g. 1 per DDP rank on 2 cores)."""
    env = dict(CHECKOUT_ENV)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="session")
def gpt2_ranks() -> Path:
    """GPT-2's ranks, fetched from PyPI (openai-whisper sdist) into data/cache/tiktoken once and sha256-checked.
    No skip: if PyPI cannot be reached, every test that needs the real GPT-2 tokenizer errors."""
    from gptlab.data.ranks import fetch_gpt2_ranks

    return fetch_gpt2_ranks(ROOT / "data" / "cache" / "tiktoken")


@pytest.fixture(scope="session")
def gpt2(gpt2_ranks):
    from gptlab.data.tokenizers import TiktokenTokenizer

    return TiktokenTokenizer("gpt2", ranks_file=str(gpt2_ranks))


def write_corpus(directory: Path, n_files: int = 2, docs_per_file: int = 150, seed: int = 0) -> list[Path]:
    """Small JSONL files of made-up documents (some non-ASCII), deterministic for a seed."""
    import json
    import random

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


@pytest.fixture
def corpus(tmp_path) -> list[Path]:
    return write_corpus(tmp_path / "corpus")
