"""Export a training checkpoint as a Hugging Face model directory (conf/export_hf.yaml).

    python scripts/export_hf.py ckpt_path=outputs/runs/<name>/<date>/<time>/checkpoints/last.ckpt out=exported/

Writes config.json, model.safetensors and the tokenizer files (tokenizer.json, tokenizer_config.json) of the
run's tokenizer, so AutoModelForCausalLM and AutoTokenizer both load the directory.
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gptlab.cli import user_errors_exit
from gptlab.config.entry import main as gptlab_main
from gptlab.errors import ConfigError
from gptlab.eval.hf_export import export_tokenizer
from gptlab.train.checkpoints import load_model, recorded_tokenizer


@gptlab_main(config_name="export_hf")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    model, hparams = load_model(cfg.ckpt_path)
    tokenizer_cfg = cfg.get("tokenizer") or recorded_tokenizer(hparams)
    if tokenizer_cfg is None:
        raise ConfigError(f"ckpt_path={cfg.ckpt_path!r} does not record its tokenizer; add tokenizer=<name>.")
    tokenizer_cfg = OmegaConf.to_container(OmegaConf.create(tokenizer_cfg), resolve=True)
    tokenizer = hydra.utils.instantiate(tokenizer_cfg)
    model.save_pretrained(cfg.out)
    export_tokenizer(tokenizer, Path(cfg.out), tokenizer_cfg)
    print(f"wrote {cfg.out} ({model.num_parameters():,} parameters, {model.config.norm}-LN, tokenizer "
          f"{tokenizer.name}, end-of-text id {tokenizer.eot_id})")


if __name__ == "__main__":
    main()
