"""Tokenize a corpus once into train/val shards: `python scripts/prepare_data.py data=python_stdlib tokenizer=gpt2`.

Takes the same overrides as src/train.py (e.g. data.source.paths=..., data.cache_dir=..., data.num_proc=4) and
writes <data.cache_dir>/<tokenizer>/{train,val}_*.bin and manifest.json. Re-running resumes an interrupted run
and is a no-op when the shards are complete. See conf/prepare_data.yaml.
"""

import logging

from omegaconf import DictConfig

from gptlab.cli import user_errors_exit
from gptlab.config.entry import main as gptlab_main
from gptlab.data.prepare_cli import prepare_from_config


@gptlab_main(config_name="prepare_data")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    print(prepare_from_config(cfg))


if __name__ == "__main__":
    main()
