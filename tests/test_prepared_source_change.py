"""A prepared cache is keyed by its source files' sizes and mtimes as well as their names: a file appended to or
replaced since is noticed, said, and the cache prepared again; an unchanged source reuses it untouched."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from gptlab.data.prepare import SOURCE_FILES, prepare
from gptlab.data.sources import TextFiles
from gptlab.data.tokenizers import ByteTokenizer


def _prepare(files: list[Path], cache: Path) -> dict:
    return prepare(TextFiles([str(f) for f in files]), ByteTokenizer(), cache, val_fraction=0.3, shard_tokens=500,
                   progress=False)


def _tokens(manifest: dict) -> tuple[int, int]:
    return manifest["splits"]["train"]["tokens"], manifest["splits"]["val"]["tokens"]


@pytest.fixture()
def corpus(tmp_path: Path) -> list[Path]:
    files = []
    for i in range(6):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(f"document {i}: " + "some words of text " * (20 + i))
        files.append(path)
    return files


def test_an_unchanged_source_reuses_the_cache_untouched(corpus: list[Path], tmp_path: Path, caplog) -> None:
    first = _prepare(corpus, tmp_path / "c")
    manifest = tmp_path / "c" / "bytes" / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    with caplog.at_level(logging.WARNING):
        assert _prepare(corpus, tmp_path / "c") == first
    assert manifest.stat().st_mtime_ns == stamp and not caplog.records
    assert [f["file"] for f in first[SOURCE_FILES]] == [str(f) for f in corpus]


@pytest.mark.parametrize("edit", ["append", "replace_same_size"])
def test_a_changed_source_file_is_said_and_prepared_again(corpus: list[Path], tmp_path: Path, caplog,
                                                         edit: str) -> None:
    before = _prepare(corpus, tmp_path / "c")
    changed = corpus[2]
    if edit == "append":
        with changed.open("a") as f:
            f.write(" and a new paragraph appended later" * 10)
    else:  # another text of the same length: only the mtime tells
        changed.write_text(changed.read_text().upper())
        stat = changed.stat()
        os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    with caplog.at_level(logging.WARNING):
        after = _prepare(corpus, tmp_path / "c")
    (message,) = [r.getMessage() for r in caplog.records]
    what = "changed size" if edit == "append" else "was modified"
    assert f"the source of {tmp_path / 'c' / 'bytes'} changed since it was prepared ({changed} {what}" in message
    assert message.endswith("; preparing it again")
    fresh = _prepare(corpus, tmp_path / "fresh")  # what a first prepare of today's files gives
    assert _tokens(after) == _tokens(fresh) and after["splits"] == fresh["splits"]
    if edit == "append":
        assert sum(_tokens(after)) > sum(_tokens(before))


def test_a_cache_from_before_file_identities_is_prepared_again_once(corpus: list[Path], tmp_path: Path,
                                                                    caplog) -> None:
    _prepare(corpus, tmp_path / "c")
    manifest_path = tmp_path / "c" / "bytes" / "manifest.json"
    old = json.loads(manifest_path.read_text())
    del old[SOURCE_FILES]
    manifest_path.write_text(json.dumps(old))
    with caplog.at_level(logging.WARNING):
        _prepare(corpus, tmp_path / "c")
        _prepare(corpus, tmp_path / "c")
    assert [r.getMessage() for r in caplog.records if "preparing it again" in r.getMessage()] == [
        f"the source of {tmp_path / 'c' / 'bytes'} changed since it was prepared (the cache does not record its "
        "source files (made by an older gptlab)); preparing it again"]


def test_another_file_list_is_refused_not_mixed(corpus: list[Path], tmp_path: Path) -> None:
    """A glob that now matches other files is another source: refused as before, naming the files."""
    from gptlab.errors import ConfigError

    _prepare(corpus, tmp_path / "c")
    with pytest.raises(ConfigError, match=r"was prepared with different settings \(source: prepared .*doc5\.txt"):
        _prepare(corpus[:-1], tmp_path / "c")
