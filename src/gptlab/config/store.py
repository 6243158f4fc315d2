"""Registers every schema in Hydra's ConfigStore under `schema/`, where the YAML files name them in their
`defaults` (e.g. conf/model/base.yaml: `- /schema/model@_here_`), so Hydra types each node while composing."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

import gptlab.config.schemas as s
from gptlab.model import GPTConfig

# (group, option) -> schema; the group is the conf/ folder whose YAML files use it.
SCHEMAS: dict[tuple[str, str], type] = {
    ("train", "train"): s.Train,
    ("model", "gpt"): GPTConfig,
    ("tokenizer", "bytes"): s.ByteTokenizer,
    ("tokenizer", "tiktoken"): s.TiktokenTokenizer,
    ("data", "datamodule"): s.Data,
    ("optimizer", "adamw"): s.AdamW,
    ("optimizer", "sgd"): s.SGD,
    ("optimizer", "adafactor"): s.Adafactor,
    ("optimizer", "muon"): s.Muon,
    ("scheduler", "cosine"): s.Cosine,
    ("scheduler", "wsd"): s.WarmupStableDecay,
    ("scheduler", "constant"): s.Constant,
    ("trainer", "lightning"): s.Trainer,
    ("paths", "paths"): s.Paths,
}


def register() -> None:
    """Idempotent: ConfigStore replaces an entry stored again under the same name."""
    store = ConfigStore.instance()
    for (group, option), schema in SCHEMAS.items():
        store.store(group=f"schema/{group}", name=option, node=schema)
