"""Plan a training run: parameters, FLOPs, memory per GPU under DDP and FSDP (the bytes train's memory check
counts, at the run's data.batch_size and precision), and days on A100/H100/H200.

    python scripts/plan.py model=gpt3_175b trainer=fsdp trainer.devices=8 trainer.num_nodes=128 \
        data.batch_size=1 tokens=300e9
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import math

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from gptlab.config.entry import main as gptlab_main
from gptlab.config.ranges import number, positive_int
from gptlab.config.schemas import Runtime
from gptlab.config.validate import check_fields
from gptlab.errors import ConfigError
from gptlab.launch.cli import user_errors_exit
from gptlab.model import GPTConfig
from gptlab.preflight.planning import format_plan, is_fsdp, make_plan


def parse_tokens(value: object) -> float:
    """tokens as a number: Hydra hands `300e9` over as a string (YAML reads it so)."""
    try:
        tokens = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        tokens = math.nan
    if not (math.isfinite(tokens) and tokens > 0):
        said = " is not set" if value is None else f"={value!r} is not a positive number"
        raise ConfigError(f"tokens{said}; pass the tokens the run trains on, e.g. tokens=300e9.")
    return tokens


@gptlab_main(config_name="plan")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    tokens = parse_tokens(cfg.get("tokens"))
    for field, value in (("trainer.devices", cfg.trainer.devices), ("trainer.num_nodes", cfg.trainer.num_nodes),
                         ("data.batch_size", cfg.data.batch_size)):
        positive_int(field, value)
    number(0.0, 1.0, low_open=True)("mfu", cfg.mfu)
    check_fields("runtime.", cfg.runtime, Runtime)
    runtime = Runtime(**OmegaConf.to_container(cfg.runtime))
    vocab = hydra.utils.instantiate(cfg.tokenizer).vocab_size
    model_cfg = GPTConfig.for_tokenizer(OmegaConf.to_container(cfg.model, resolve=True), vocab)
    gpus = int(cfg.trainer.devices) * int(cfg.trainer.num_nodes)
    trainer = {key: cfg.trainer.get(key) for key in ("devices", "num_nodes", "precision")}  # what memory depends on
    strategy = cfg.trainer.get("strategy")
    trainer["strategy"] = OmegaConf.to_container(strategy) if isinstance(strategy, DictConfig) else strategy
    plan = make_plan(model_cfg, tokens, gpus, micro_batch=cfg.data.batch_size, mfu=cfg.mfu, trainer_cfg=trainer,
                     runtime=runtime)
    label = "FSDP" if is_fsdp(trainer["strategy"]) else "DDP"
    print(format_plan(plan, HydraConfig.get().runtime.choices.model, cfg.mfu, label))


if __name__ == "__main__":
    main()
