"""A deterministic made-up corpus of any size, for preparation benchmarks and tests that need more than a few KB.

Documents are JSONL records of English-like prose (words from a fixed list, some non-ASCII) of 0.5 to 8 KB, in
files of about `file_bytes`. numpy draws every choice from one seed, so the same size gives the same bytes on any
machine, and a few GB are written at disk speed rather than Python-loop speed: sentences come from a pool built
once, documents are runs of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = ("the of and to in is was for on that with as by at from this model token layer attention data train "
         "loss value step weight gradient batch window shard corpus document sentence river mountain city "
         "history music science language number people school water energy market café naïve Zürich 東京 "
         "résumé 2024 17 3.5 (see above) -- e.g. i.e.").split()


def _sentence_pool(rng: np.random.Generator, n: int = 4096) -> list[str]:
    pool = []
    for _ in range(n):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(6, 24)))]
        pool.append(" ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!", ",\n"]))
    return pool


def write_corpus(directory: Path, total_bytes: int, file_bytes: int = 64 << 20, seed: int = 0) -> list[Path]:
    """JSONL files under `directory` holding about `total_bytes` (at least one document); returns their paths."""
    rng = np.random.default_rng(seed)
    pool = _sentence_pool(rng)
    directory.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    written, doc = 0, 0
    while written < total_bytes:
        path = directory / f"part{len(paths):05d}.jsonl"
        paths.append(path)
        with open(path, "w", encoding="utf-8") as out:
            in_file = 0
            while in_file < file_bytes and written + in_file < total_bytes:
                picks = rng.integers(0, len(pool), int(rng.integers(6, 90)))
                line = json.dumps({"id": doc, "text": " ".join(pool[i] for i in picks)}, ensure_ascii=False) + "\n"
                in_file += out.write(line)  # characters; bytes are counted from the file below
                doc += 1
        written += path.stat().st_size
    return paths
