"""Two preparers of one cache (two `prepare_data.py`, or a prepare and a train with data.store=prepared, which call
the same gptlab.data.prepare.prepare) never collide (issue 46 item 2): the second waits for the first, saying so,
then finds the cache complete; the cache is whole afterwards. Before, one removed the other's open temp shard and
the other died with FileNotFoundError: .../.train_000000.bin.<random>.tmp. Forked processes, no imports to wait for."""

from __future__ import annotations

import json
import logging
import multiprocessing
from pathlib import Path
from typing import Iterator

import pytest

from gptlab.data.prepare import load_prepared, prepare
from gptlab.data.sources import TextFiles
from gptlab.data.tokenizers import ByteTokenizer

FORK = multiprocessing.get_context("fork")
DOCS = 600  # > 2 batches of 256 documents: the first is in a shard's temp file while the second is read
TIMEOUT_S = 600  # a hang guard, never a speed limit


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i}: " + "words and more words " * 8}) + "\n"
                            for i in range(DOCS)))
    return path


class GatedFiles(TextFiles):
    """TextFiles that stops after its first batch of documents until `gate` is set: a preparer caught with a shard
    half written."""

    def __init__(self, path: Path, gate, reached) -> None:
        super().__init__([str(path)])
        self.gate, self.reached = gate, reached

    def documents(self) -> Iterator[str]:
        for i, text in enumerate(super().documents()):
            if i == 300:
                self.reached.set()
                assert self.gate.wait(TIMEOUT_S)
            yield text


def _prepare(source: TextFiles, cache: Path, said) -> None:
    """One preparer: puts what it says ("waiting") and how it ends ("ok" or the error) on `said`."""

    class Relay(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "being prepared by another process" in record.getMessage():
                said.put("waiting")

    logging.getLogger("gptlab.data.prepare").addHandler(Relay())
    try:
        prepare(source, ByteTokenizer(), cache, val_fraction=0.1, shard_tokens=20_000, num_proc=1, progress=False)
        said.put("ok")
    except BaseException as err:  # noqa: BLE001 - reported to the test
        said.put(f"{type(err).__name__}: {err}")


def start(source: TextFiles, cache: Path):
    said = FORK.Queue()
    proc = FORK.Process(target=_prepare, args=(source, cache, said), daemon=True)
    proc.start()
    return proc, said


def ending(said) -> str:
    """How a preparer ended (past its "waiting")."""
    while (message := said.get(timeout=TIMEOUT_S)) == "waiting":
        pass
    return message


def whole(cache: Path) -> None:
    splits = load_prepared(cache, ByteTokenizer())  # every shard against the manifest and its sha256
    assert len(splits["train"]) > 0 and len(splits["val"]) > 0
    assert not [p.name for p in (cache / "bytes").iterdir() if p.name.startswith(".")], "a temp or lock file is left"


def test_a_second_preparer_waits_for_one_caught_mid_shard(corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    gate, reached = FORK.Event(), FORK.Event()
    first, first_said = start(GatedFiles(corpus, gate, reached), cache)
    assert reached.wait(TIMEOUT_S)  # the first has a shard open
    second, second_said = start(TextFiles([str(corpus)]), cache)
    try:
        assert second_said.get(timeout=TIMEOUT_S) == "waiting"
    finally:
        gate.set()
    assert first_said.get(timeout=TIMEOUT_S) == "ok"
    assert second_said.get(timeout=TIMEOUT_S) == "ok"
    first.join(TIMEOUT_S), second.join(TIMEOUT_S)
    whole(cache)


def test_preparers_started_together_many_times_all_succeed(corpus: Path, tmp_path: Path) -> None:
    for attempt in range(6):
        cache = tmp_path / f"cache{attempt}"
        started = [start(TextFiles([str(corpus)]), cache) for _ in range(3)]
        ends = [ending(said) for _, said in started]
        for proc, _ in started:
            proc.join(TIMEOUT_S)
        assert ends == ["ok"] * 3, ends
        whole(cache)
