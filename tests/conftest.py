"""Fixtures only; every shared helper lives in helpers.py.

The Hugging Face hub is unreachable here: offline mode makes `datasets` fail at once instead of retrying for
half a minute, which is also what users get with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from helpers import ROOT, write_corpus  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run where CUDA is present and are skipped, with the reason, where it is not."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine); run `python scripts/doctor.py` on one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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


@pytest.fixture
def corpus(tmp_path) -> list[Path]:
    return write_corpus(tmp_path / "corpus")
