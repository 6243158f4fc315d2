"""Evaluate a checkpoint: `python src/eval.py ckpt_path=<file> [data=...] [tokenizer=...] [tasks=[lambada,hellaswag]]`.
See conf/eval.yaml."""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from gptlab.config.entry import main as gptlab_main
from gptlab.launch.cli import user_errors_exit
from gptlab.runs.run_dir import discard_on_early_error


@gptlab_main(config_name="eval")
@user_errors_exit
def main(cfg: DictConfig) -> Optional[float]:
    from gptlab.apps.evaluate import evaluate  # here: a config error and --cfg never import Lightning

    # A refused argument leaves no outputs/evals/<date>/<time>/ behind (CheckOutputDir noted it before Hydra made it).
    with discard_on_early_error(Path(cfg.paths.output_dir), "eval.log"):
        return evaluate(cfg).get("val/loss")  # for sweepers; None with val_loss=false


if __name__ == "__main__":
    main()
