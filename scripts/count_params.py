"""Print a model's parameters per component, their shares and training FLOPs per token
([S3]'s table, docs/presets.md).

    python scripts/count_params.py model=gpt3_175b model.attn_bias=false
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from gptlab.config.entry import main as gptlab_main
from gptlab.launch.cli import user_errors_exit
from gptlab.model import GPTConfig
from gptlab.model.accounting import parameter_table


@gptlab_main(config_name="count_params")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    vocab = hydra.utils.instantiate(cfg.tokenizer).vocab_size
    model_cfg = GPTConfig.for_tokenizer(OmegaConf.to_container(cfg.model, resolve=True), vocab)
    print(parameter_table(model_cfg, name=HydraConfig.get().runtime.choices.model))


if __name__ == "__main__":
    main()
