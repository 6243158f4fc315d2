"""`scripts/prepare_data.py`: prepare the data of a training config (conf/prepare_data.yaml reads conf/train.yaml
with the same overrides), so the shards land exactly where `src/train.py data=... tokenizer=...` looks for them."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from gptlab.data.mixture import Mixture
from gptlab.data.prepare import prepare, prepared_dir


def prepare_from_config(cfg: DictConfig) -> Path:
    """The shards of `cfg.data`, where training reads them; a Mixture's go source by source into
    <data.cache_dir>/<source name>/ (gptlab.data.mixture_store), and the path returned is their parent."""
    data = cfg.data
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    source = hydra.utils.instantiate(data.source)
    if isinstance(source, Mixture):
        source.check_tokenizer(tokenizer)
        parts = {f"{data.cache_dir}/{name}": part for name, part in source.sources.items()}
    else:
        parts = {data.cache_dir: source}
    for cache_dir, part in parts.items():
        start = time.perf_counter()
        manifest = prepare(part, tokenizer, cache_dir, data.val_fraction, data.shard_tokens,
                           data.num_proc or os.cpu_count() or 1)
        logging.getLogger(__name__).info(
            "%s: %s (%.1f s)", prepared_dir(cache_dir, tokenizer),
            json.dumps({s: {k: v for k, v in m.items() if k != "shards"} for s, m in manifest["splits"].items()}),
            time.perf_counter() - start,
        )
    if data.store != "prepared":
        logging.getLogger(__name__).warning(
            "data.store=%s: training does not read these shards; add data.store=prepared to train from them.",
            data.store)
    return Path(data.cache_dir) if isinstance(source, Mixture) else prepared_dir(data.cache_dir, tokenizer)
