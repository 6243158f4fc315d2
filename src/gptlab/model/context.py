"""The longest context a model can be run at, whatever it was trained at: the one fact eval.py's `contexts` and the
data.block_size rule both ask."""

from __future__ import annotations

from typing import Optional

from gptlab.model.config import GPTConfig
from gptlab.model.positions import POSITIONS


def longest_context(config: GPTConfig) -> Optional[int]:
    """model.block_size for a trained absolute table (learned, eq. 2: exactly block_size rows, pos_emb.weight);
    None for a scheme that computes its positions for any length (sinusoidal, rope, alibi, none). The table's
    parameter count is the source: positions that are trained weights cannot grow past the rows trained."""
    if POSITIONS[config.pos_emb].parameters(config.block_size, config.n_embd) > 0:
        return config.block_size
    return None
