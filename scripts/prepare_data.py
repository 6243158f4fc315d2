"""Tokenize a corpus once into train/val shards: `python scripts/prepare_data.py data=python_stdlib tokenizer=gpt2`.

Takes the same overrides as src/train.py (e.g. data.source.paths=..., data.cache_dir=..., data.num_proc=4) and
writes <data.cache_dir>/<tokenizer>/{train,val}_*.bin and manifest.json. Re-running resumes an interrupted run
and is a no-op when the shards are complete. See conf/prepare_data.yaml.
"""

import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from gptlab.apps.prepare_data import prepare_from_config
from gptlab.runtime.cli import user_errors_exit
from gptlab.runtime.config_check import DATA, check_table


@hydra.main(version_base="1.3", config_path="../conf", config_name="prepare_data")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    check_table("data.", OmegaConf.to_container(cfg.data, resolve=True), DATA)  # train's checks, before any work
    print(prepare_from_config(cfg))


if __name__ == "__main__":
    main()
