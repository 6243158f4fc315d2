"""Plan a training run: parameters, FLOPs, memory per GPU under DDP and FSDP, and days on A100/H100/H200.

    python scripts/plan.py model=gpt3_175b trainer.devices=8 trainer.num_nodes=128 +tokens=300e9
"""

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from gptlab.cli import user_errors_exit
from gptlab.config.entry import main as gptlab_main
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.tools.planning import format_plan, make_plan


@gptlab_main(config_name="plan")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    tokens = cfg.get("tokens")
    if tokens is None or float(tokens) <= 0:
        raise ConfigError("tokens is missing or not positive; pass the training tokens, e.g. +tokens=300e9.")
    vocab = hydra.utils.instantiate(cfg.tokenizer).vocab_size
    model_cfg = GPTConfig.for_tokenizer(OmegaConf.to_container(cfg.model, resolve=True), vocab)
    gpus = int(cfg.trainer.devices) * int(cfg.trainer.num_nodes)
    plan = make_plan(model_cfg, float(tokens), gpus, micro_batch=cfg.micro_batch, mfu=cfg.mfu)
    print(format_plan(plan, HydraConfig.get().runtime.choices.model, cfg.mfu, cfg.micro_batch))


if __name__ == "__main__":
    main()
