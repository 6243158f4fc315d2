"""Export a training checkpoint as a Hugging Face model directory (conf/export_hf.yaml).

    python scripts/export_hf.py ckpt_path=outputs/runs/<date>/<time>/checkpoints/last.ckpt out=exported/
"""

import hydra
from omegaconf import DictConfig

from gptlab.cli import user_errors_exit
from gptlab.train.checkpoints import load_model


@hydra.main(version_base="1.3", config_path="../conf", config_name="export_hf")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    model, _ = load_model(cfg.ckpt_path)
    model.save_pretrained(cfg.out)
    print(f"wrote {cfg.out} ({model.num_parameters():,} parameters, {model.config.norm}-LN)")


if __name__ == "__main__":
    main()
