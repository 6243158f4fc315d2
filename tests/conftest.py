"""Shared fixtures. The Hugging Face hub is unreachable here: offline mode makes `datasets` fail at once
instead of retrying for half a minute, which is also what users get with HF_HUB_OFFLINE=1."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def gpt2_ranks() -> Path:
    """GPT-2's ranks, fetched from PyPI (openai-whisper sdist) into data/cache/tiktoken once and sha256-checked.
    No skip: if PyPI cannot be reached, every test that needs the real GPT-2 tokenizer errors."""
    from gptlab.data.ranks import fetch_gpt2_ranks

    return fetch_gpt2_ranks(REPO / "data" / "cache" / "tiktoken")


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
