"""The scaling ladder's token rule, as an OmegaConf resolver: `trainer.max_steps: ${gptlab.ladder_steps:20}` trains
each size for 20 tokens per non-embedding parameter (Chinchilla's compute-optimal ratio is ~20 per parameter).
Hydra interpolation cannot multiply, and the parameter count depends on the composed model, hence a resolver.
Importing this module registers it (gptlab.apps.train does, so every training entry point has it). A run bounded
by tokens, FLOPs or seconds takes `budget=` instead (gptlab.config.budget)."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gptlab.config.budget import model_and_step
from gptlab.config.schemas import Train
from gptlab.config.validate import check_fields
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters

RESOLVER = "gptlab.ladder_steps"


def non_embedding_parameters(model: dict[str, Any], vocab_size: int) -> int:
    """Kaplan et al. 2020's N: parameters without the token embedding, the learned position table and an untied
    head, so a tied and an untied model of one size get the same tokens (the report's `non-embedding` column
    counts an untied head in, as it is compute)."""
    counts = count_parameters(GPTConfig.for_tokenizer(model, vocab_size))
    return counts["total"] - counts["embedding"] - counts["position"] - counts["head"]


def ladder_steps(tokens_per_param: float, *, _root_: DictConfig) -> int:
    """Optimizer steps that show the model tokens_per_param × N tokens: ⌈ratio · N / tokens per step⌉, with tokens
    per step = global_batch_tokens, else data.batch_size × model.block_size (one device, no accumulation)."""
    if tokens_per_param is None:
        raise ConfigError("ladder_tokens_per_param=null, but trainer.max_steps is computed from it "
                          "(${gptlab.ladder_steps:...}): set ladder_tokens_per_param=20 (Chinchilla's tokens per "
                          "parameter), or give the steps yourself, e.g. trainer.max_steps=1000.")
    check_fields("", {"ladder_tokens_per_param": tokens_per_param}, Train)  # the schema's range, one source
    model, vocab, per_step = model_and_step(_root_)
    return max(1, math.ceil(tokens_per_param * non_embedding_parameters(model, vocab) / per_step))


OmegaConf.register_new_resolver(RESOLVER, ladder_steps, replace=True)
