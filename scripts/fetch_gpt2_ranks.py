"""Fetch GPT-2's BPE ranks from PyPI (openai-whisper sdist), check the sha256, print the path.

Usage: python scripts/fetch_gpt2_ranks.py [--cache-dir DIR]   (default data/cache/tiktoken)
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split


from gptlab.data.ranks import DEFAULT_CACHE, fetch_gpt2_ranks
from gptlab.launch.arguments import ArgumentParser, writable_dir
from gptlab.launch.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", type=writable_dir, default=DEFAULT_CACHE, help="where gpt2.tiktoken is written")
    print(fetch_gpt2_ranks(parser.parse_args().cache_dir))  # a file in the way is refused by --cache-dir's type


if __name__ == "__main__":
    main()
