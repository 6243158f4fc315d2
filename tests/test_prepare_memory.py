"""Preparation memory stays flat as the corpus grows: the peak over a 4x larger corpus is about the same, far below
what holding the corpus (as text or as tokens) would add. Peaks are the kernel's (VmHWM, the largest worker's
ru_maxrss), measured in a process of their own, so they do not depend on machine speed or load."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, HANG_GUARD_S

from gptlab.tools.benchmarks.synthetic_corpus import write_corpus

MIB = 1 << 20
SIZES_MIB = (16, 64)


def peak(corpus: Path, cache: Path) -> dict:
    """prepare with 2 workers and one shard bigger than the corpus: a writer that buffered a shard would hold
    every token."""
    cmd = [sys.executable, "-m", "gptlab.tools.benchmarks.prepare_memory", str(corpus), str(cache), "bytes", "2",
           str(1 << 30)]
    done = subprocess.run(cmd, env=CHECKOUT_ENV, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def peaks(tmp_path_factory) -> dict[int, dict]:
    root = tmp_path_factory.mktemp("memory")
    out = {}
    for mib in SIZES_MIB:
        write_corpus(root / f"corpus{mib}", mib * MIB, file_bytes=8 * MIB)
        out[mib] = peak(root / f"corpus{mib}", root / f"cache{mib}")
    return out


def test_parent_peak_does_not_grow_with_the_corpus(peaks):
    small, large = peaks[SIZES_MIB[0]], peaks[SIZES_MIB[1]]
    extra_text = large["text_bytes"] - small["text_bytes"]  # 48 MiB: as text or uint16 tokens, >= 48 MiB more
    assert large["tokens"] > 3.5 * small["tokens"]
    assert (large["parent_growth_mib"] - small["parent_growth_mib"]) * MIB < extra_text / 4, peaks
    assert large["parent_growth_mib"] * MIB < large["text_bytes"] * 0.75, peaks  # the text alone is 1x


def test_worker_peak_does_not_grow_with_the_corpus(peaks):
    small, large = peaks[SIZES_MIB[0]], peaks[SIZES_MIB[1]]
    extra_text = large["text_bytes"] - small["text_bytes"]
    assert (large["worker_growth_mib"] - small["worker_growth_mib"]) * MIB < extra_text / 4, peaks
