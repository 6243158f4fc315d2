"""Evaluate a checkpoint: `python src/eval.py ckpt_path=<file> [data=...] [tokenizer=...] [tasks=[lambada,hellaswag]]`.
See conf/eval.yaml."""

from typing import Optional

import hydra
from omegaconf import DictConfig

from gptlab.apps.evaluate import evaluate
from gptlab.runtime.cli import user_errors_exit


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
@user_errors_exit
def main(cfg: DictConfig) -> Optional[float]:
    return evaluate(cfg).get("val/loss")  # for sweepers; None with val_loss=false


if __name__ == "__main__":
    main()
