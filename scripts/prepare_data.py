"""Tokenize a corpus once into train/val shards: `python scripts/prepare_data.py data=python_stdlib tokenizer=gpt2`.

Takes the same overrides as src/train.py (e.g. data.source.paths=..., data.cache_dir=..., data.num_proc=4) and
writes <data.cache_dir>/<tokenizer>/{train,val}_*.bin and manifest.json. Re-running resumes an interrupted run
and is a no-op when the shards are complete.
"""

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

from gptlab.cli import user_errors_exit  # noqa: E402
from gptlab.data.prepare_cli import prepare_from_overrides  # noqa: E402


@user_errors_exit
def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    print(prepare_from_overrides(sys.argv[1:]))


if __name__ == "__main__":
    main()
