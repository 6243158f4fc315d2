"""Evaluate a checkpoint: `python src/eval.py ckpt_path=<file> [data=...] [tokenizer=...]`. See conf/eval.yaml."""

import hydra
from omegaconf import DictConfig

from gptlab.cli import user_errors_exit
from gptlab.eval.validation import evaluate


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
@user_errors_exit
def main(cfg: DictConfig) -> float:
    return evaluate(cfg)["val/loss"]


if __name__ == "__main__":
    main()
