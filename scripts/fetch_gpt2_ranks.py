"""Fetch GPT-2's BPE ranks from PyPI (openai-whisper sdist), check the sha256, print the path.

Usage: python scripts/fetch_gpt2_ranks.py [CACHE_DIR]   (default data/cache/tiktoken), then train with
`tokenizer=gpt2 tokenizer.ranks_file=<printed path>`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from gptlab.cli import user_errors_exit  # noqa: E402
from gptlab.data.ranks import DEFAULT_CACHE, fetch_gpt2_ranks  # noqa: E402


@user_errors_exit
def main() -> None:
    print(fetch_gpt2_ranks(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CACHE))


if __name__ == "__main__":
    main()
