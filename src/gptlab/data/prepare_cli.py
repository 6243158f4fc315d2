"""`scripts/prepare_data.py`: compose the training config with the same overrides and prepare its data, so the
shards land exactly where `src/train.py data=... tokenizer=...` will look for them."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Sequence

import hydra
from hydra import compose, initialize_config_dir

from gptlab.data.prepare import prepare, prepared_dir
from gptlab.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


def prepare_from_overrides(overrides: Sequence[str]) -> Path:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=list(overrides))
    data = cfg.data
    if "cache_dir" not in data:
        raise ConfigError(
            f"data={data.get('source')} is tokenized in memory when training starts; there is nothing to prepare. "
            "Choose a source with prepared shards: "
            "data=python_stdlib | text_files | hf | openwebtext | fineweb_edu | tinystories."
        )
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    source = hydra.utils.instantiate(data.source)
    start = time.perf_counter()
    manifest = prepare(source, tokenizer, data.cache_dir, data.val_fraction, data.shard_tokens,
                       data.num_proc or os.cpu_count() or 1)
    out = prepared_dir(data.cache_dir, tokenizer)
    logging.getLogger(__name__).info(
        "%s: %s (%.1f s)", out,
        json.dumps({s: {k: v for k, v in m.items() if k != "shards"} for s, m in manifest["splits"].items()}),
        time.perf_counter() - start,
    )
    return out
