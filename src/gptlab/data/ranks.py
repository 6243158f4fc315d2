"""Fetch GPT-2's BPE ranks where only PyPI is reachable (docs/layout.md, "Tokenizer ranks").

tiktoken downloads its ranks from openaipublic.blob.core.windows.net. The same file (byte for byte the
r50k_base ranks, which GPT-2 uses) ships inside the openai-whisper source distribution on PyPI, so it
can be had through pip and checked against the hash tiktoken itself expects.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from gptlab.atomic import atomic_write_bytes
from gptlab.data.tokenizers import DEFAULT_RANKS_DIR
from gptlab.errors import ConfigError

WHISPER_SDIST = "openai-whisper==20250625"
MEMBER_SUFFIX = "whisper/assets/gpt2.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
DEFAULT_CACHE = Path(os.environ.get("GPTLAB_RANKS_DIR", DEFAULT_RANKS_DIR))  # where the tokenizer looks first


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gpt2_ranks(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """Return `cache_dir/gpt2.tiktoken`, downloading it via `pip download` if absent; always hash-checked."""
    target = Path(cache_dir) / "gpt2.tiktoken"
    if target.is_file() and sha256_file(target) == GPT2_RANKS_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", WHISPER_SDIST, "-d", tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        sdists = list(Path(tmp).glob("*.tar.gz"))
        yourself = f"copy gpt2.tiktoken to {target} yourself (sha256 {GPT2_RANKS_SHA256})."
        if result.returncode != 0 or not sdists:
            raise ConfigError(
                f"`{' '.join(cmd[2:])}` failed (exit {result.returncode}): {result.stderr.strip()[-500:]}\n"
                f"PyPI must be reachable to fetch the GPT-2 ranks; otherwise {yourself}"
            )
        with tarfile.open(sdists[0]) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith(MEMBER_SUFFIX)), None)
            if member is None:
                raise ConfigError(f"{sdists[0].name} holds no {MEMBER_SUFFIX}; the sdist layout changed: {yourself}")
            data = tar.extractfile(member).read()
        got = hashlib.sha256(data).hexdigest()
        if got != GPT2_RANKS_SHA256:
            raise ConfigError(f"{MEMBER_SUFFIX} in {sdists[0].name} has sha256 {got}, expected {GPT2_RANKS_SHA256}: "
                              f"{yourself}")
        atomic_write_bytes(target, data, mode=0o644)
    return target
