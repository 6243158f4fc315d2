"""Peak memory of `prepare` as the corpus grows (scripts/bench_prepare_memory.py; tests/test_prepare_memory.py).

Run as `python -m gptlab.tools.benchmarks.prepare_memory CORPUS_DIR CACHE_DIR TOKENIZER NUM_PROC SHARD_TOKENS` in a
process of its own, so that its peaks are prepare's: the parent's peak RSS is the kernel's high-water mark (VmHWM),
reset after the imports (/proc/self/clear_refs), and the workers' is the largest child's `ru_maxrss`
(RUSAGE_CHILDREN). Both are exact, not sampled. A forked worker's RSS includes the pages it shares with the
parent, so its growth is taken over the parent's RSS when the pool starts. Linux only (/proc). Prints one JSON line.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gptlab.data.prepare import prepare
from gptlab.data.sources import TextFiles
from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer
from gptlab.tools.benchmarks.synthetic_corpus import write_corpus

MIB = 1 << 20


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(corpus: Path, cache: Path, tokenizer: str, num_proc: int, shard_tokens: int) -> dict[str, Any]:
    tok = ByteTokenizer() if tokenizer == "bytes" else TiktokenTokenizer(tokenizer)
    source = TextFiles(sorted(str(p) for p in corpus.glob("*.jsonl")))
    Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS to the current RSS
    baseline = _status_kib("VmRSS")
    start = time.perf_counter()
    manifest = prepare(source, tok, cache, val_fraction=0.01, shard_tokens=shard_tokens, num_proc=num_proc,
                       progress=False)
    seconds = time.perf_counter() - start
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if num_proc > 1 else baseline
    return {
        "text_bytes": source.size_bytes(),
        "tokens": sum(manifest["splits"][s]["tokens"] for s in ("train", "val")),
        "seconds": seconds,
        "baseline_mib": baseline / 1024,
        "parent_growth_mib": (_status_kib("VmHWM") - baseline) / 1024,
        "worker_growth_mib": max(workers - baseline, 0) / 1024,
    }


def run_one(corpus: Path, cache: Path, tokenizer: str, num_proc: int, shard_tokens: int) -> dict[str, Any]:
    """`measure` in a fresh process, so that each size's peaks are its own."""
    cmd = [sys.executable, "-m", "gptlab.tools.benchmarks.prepare_memory", str(corpus), str(cache), tokenizer,
           str(num_proc), str(shard_tokens)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(sizes_mib: list[int], root: Path, tokenizer: str, num_proc: int, shard_tokens: int) -> None:
    """Generate each corpus under root (kept for re-runs), prepare it into a fresh cache, print a markdown table."""
    print(f"tokenizer={tokenizer} num_proc={num_proc} shard_tokens={shard_tokens:,}\n")
    print("| text | tokens | time | tokens/s | parent RSS after imports | parent peak growth | "
          "largest worker peak growth |")
    print("|---|---|---|---|---|---|---|")
    for mib in sizes_mib:
        corpus = root / f"corpus_{mib}MiB"
        if not corpus.is_dir():
            write_corpus(corpus, mib * MIB)
        cache = root / f"cache_{mib}MiB_{tokenizer}_{num_proc}"
        shutil.rmtree(cache, ignore_errors=True)  # this script's own cache from an earlier run: prepare afresh
        r = run_one(corpus, cache, tokenizer, num_proc, shard_tokens)
        print(f"| {r['text_bytes'] / MIB:,.0f} MiB | {r['tokens']:,} | {r['seconds']:.0f} s | "
              f"{r['tokens'] / r['seconds']:,.0f} | {r['baseline_mib']:.0f} MiB | {r['parent_growth_mib']:.1f} MiB | "
              f"{r['worker_growth_mib']:.1f} MiB |", flush=True)


if __name__ == "__main__":
    corpus_dir, cache_dir, tokenizer_name, procs, shard = sys.argv[1:6]
    print(json.dumps(measure(Path(corpus_dir), Path(cache_dir), tokenizer_name, int(procs), int(shard))))
