"""The GPT model of docs/model.md as plain PyTorch: no Lightning, no Hydra."""

from gptlab.model.accounting import count_parameters, training_flops_per_token
from gptlab.model.config import GPTConfig
from gptlab.model.gpt import GPT
from gptlab.model.loss import next_token_loss

__all__ = ["GPT", "GPTConfig", "count_parameters", "next_token_loss", "training_flops_per_token"]
