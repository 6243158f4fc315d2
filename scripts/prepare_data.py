"""Tokenize a corpus once into train/val shards: `python scripts/prepare_data.py data=python_stdlib tokenizer=gpt2`.

Takes the same overrides as src/train.py (e.g. data.source.paths=..., data.cache_dir=..., data.num_proc=4) and
writes <data.cache_dir>/<tokenizer>/{train,val}_*.bin and manifest.json. Re-running resumes an interrupted run
and is a no-op when the shards are complete. See conf/prepare_data.yaml.
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import logging

from omegaconf import DictConfig

from gptlab.apps.prepare_data import prepare_from_config
from gptlab.config.entry import main as gptlab_main
from gptlab.config.validate import check_node
from gptlab.launch.cli import user_errors_exit


@gptlab_main(config_name="prepare_data")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    check_node("", cfg)  # train's checks of what it reads, and of keys appended at the top level, before any work
    check_node("data.", cfg.data)
    print(prepare_from_config(cfg))


if __name__ == "__main__":
    main()
