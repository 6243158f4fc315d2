"""Sample from a trained model: `python src/sample.py ckpt_path=<ckpt or HF dir> prompt="..."`. See conf/sample.yaml."""

import hydra
from omegaconf import DictConfig

from gptlab.eval.sampling import sample
from gptlab.runtime.cli import user_errors_exit


@hydra.main(version_base="1.3", config_path="../conf", config_name="sample")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    for i, text in enumerate(sample(cfg)):
        if i:
            print("\n" + "-" * 40)
        print(text)


if __name__ == "__main__":
    main()
