"""Common random numbers for seeds: each weight tensor drawn from its own generator, seeded by (seed, its name).

Drawing every tensor from one global stream makes a variant that adds or drops a tensor (learned positions, an
untied head) shift the draws of every tensor after it, so two variants under one seed start from unrelated
weights. Keyed by name, a tensor two variants share starts identical in both, and their difference per seed
measures the variant, not the draw: the report's paired test relies on it (docs/ablations.md, Paired seeds).
"""

from __future__ import annotations

import hashlib
from typing import Callable, Optional

import torch

GeneratorFor = Callable[[str], Optional[torch.Generator]]


def tensor_generators(seed: int) -> GeneratorFor:
    """name -> a CPU generator seeded by sha256(seed, name): stable across processes (Python's hash() is not)."""
    def generator_for(name: str) -> torch.Generator:
        digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))

    return generator_for


def global_stream(name: str) -> None:
    """No generator of its own: the tensor draws from torch's global RNG, in module order (the unkeyed init)."""
    return None
