"""Preparation throughput and its scaling with worker processes (scripts/bench_prepare.py).

Every process count prepares the same generated corpus (read from the page cache after the first pass) into a
fresh cache dir; the counts are interleaved within each round and the best of the rounds is kept, so load that comes
and goes on a shared machine hits every count alike. Scaling efficiency is rate(n) / (n * rate(1)), both measured
in this run.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import time
from pathlib import Path

from gptlab.data.prepare import prepare
from gptlab.data.sources import TextFiles
from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer
from gptlab.tools.benchmarks.synthetic_corpus import write_corpus


def tokens_per_s(paths: list[Path], tokenizer, cache: Path, num_proc: int) -> float:
    shutil.rmtree(cache, ignore_errors=True)  # this benchmark's own cache from the last round
    start = time.perf_counter()
    manifest = prepare(TextFiles([str(p) for p in paths]), tokenizer, cache, val_fraction=0.01, num_proc=num_proc,
                       progress=False)
    seconds = time.perf_counter() - start
    return sum(manifest["splits"][s]["tokens"] for s in ("train", "val")) / seconds


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(counts: list[int], mib: int, repeats: int, tokenizer_name: str, root: Path) -> None:
    tokenizer = ByteTokenizer() if tokenizer_name == "bytes" else TiktokenTokenizer(tokenizer_name)
    corpus = root / f"corpus_{mib}MiB"
    paths = sorted(corpus.glob("*.jsonl")) if corpus.is_dir() else write_corpus(corpus, mib << 20)
    load_before = os.getloadavg()
    best = {n: 0.0 for n in counts}
    for _ in range(repeats):
        for n in counts:
            best[n] = max(best[n], tokens_per_s(paths, tokenizer, root / "cache", n))
    shutil.rmtree(root / "cache", ignore_errors=True)
    print(f"{datetime.date.today()}, {cpu_name()}, {os.cpu_count()} logical cores; {mib} MiB of generated JSONL, "
          f"tokenizer {tokenizer_name}, best of {repeats} interleaved rounds; load average (1 min) "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print("| processes | tokens/s | tokens/s per process | scaling efficiency |")
    print("|---|---|---|---|")
    for n in counts:
        print(f"| {n} | {best[n]:,.0f} | {best[n] / n:,.0f} | {best[n] / (n * best[counts[0]]) * counts[0]:.0%} |")
