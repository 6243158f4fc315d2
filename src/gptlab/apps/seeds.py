"""The seed a run draws its data order and initial weights from: paired across a sweep's variants, or not.

Paired (`paired_seeds: true`, the default): seed s is the same data order in every variant, and the same initial
weights wherever two variants have the same tensor (model.paired_init), so the report compares arms seed by seed
(common random numbers). Unpaired: the run seed is drawn from (seed, the variant's model, optimizer, scheduler and
data), so variants under one seed share nothing; the report then reads them as independent samples (Welch). The
trainer node is left out so that a resume with a larger trainer.max_steps keeps its seed.
"""

from __future__ import annotations

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

VARIANT_NODES = ("model", "optimizer", "scheduler", "data")


def run_seed(cfg: DictConfig) -> int:
    """cfg.seed when paired, else a seed keyed by the variant's config (stable across processes and resumes)."""
    if cfg.get("paired_seeds", True):
        return int(cfg.seed)
    nodes = {key: OmegaConf.to_container(cfg[key], resolve=True) if cfg.get(key) is not None else None
             for key in VARIANT_NODES}
    if isinstance(nodes["data"], dict):
        nodes["data"].pop("seed", None)
    text = json.dumps({"seed": int(cfg.seed), **nodes}, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
