"""Fetch GPT-2's BPE ranks from PyPI (openai-whisper sdist), check the sha256, print the path.

Usage: python scripts/fetch_gpt2_ranks.py [--cache-dir DIR]   (default data/cache/tiktoken)
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from pathlib import Path

from gptlab.config.ranges import writable_dir
from gptlab.data.ranks import DEFAULT_CACHE, fetch_gpt2_ranks
from gptlab.launch.cli import ArgumentParser, user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where gpt2.tiktoken is written")
    cache_dir = parser.parse_args().cache_dir
    writable_dir("--cache-dir", str(cache_dir))  # a file in the way is one message, not a FileExistsError
    print(fetch_gpt2_ranks(cache_dir))


if __name__ == "__main__":
    main()
