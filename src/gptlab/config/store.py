"""Registers every schema in Hydra's ConfigStore under `schema/`, where the YAML files name them in their
`defaults` (e.g. conf/model/base.yaml: `- /schema/model@_here_`), so Hydra types each node while composing."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

import gptlab.config.schemas as s
from gptlab.model import GPTConfig

# conf/ folder -> {option: schema}: the YAML files of that folder name `- /schema/<folder>/<option>@_here_`.
GROUPS: dict[str, dict[str, type]] = {
    "train": {"train": s.Train}, "model": {"gpt": GPTConfig}, "data": {"datamodule": s.Data},
    "trainer": {"lightning": s.Trainer}, "paths": {"paths": s.Paths},
    "tokenizer": {"bytes": s.ByteTokenizer, "tiktoken": s.TiktokenTokenizer},
    "optimizer": {"adamw": s.AdamW, "sgd": s.SGD, "adafactor": s.Adafactor, "muon": s.Muon,
                  "normuon": s.NorMuon},
    "scheduler": {"cosine": s.Cosine, "wsd": s.WarmupStableDecay, "constant": s.Constant},
}
SCHEMAS: dict[tuple[str, str], type] = {(group, option): schema for group, options in GROUPS.items()
                                        for option, schema in options.items()}


def register() -> None:
    """Idempotent: ConfigStore replaces an entry stored again under the same name."""
    store = ConfigStore.instance()
    for (group, option), schema in SCHEMAS.items():
        store.store(group=f"schema/{group}", name=option, node=schema)
