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
    share_when_copied()
    store = ConfigStore.instance()
    for (group, option), schema in SCHEMAS.items():
        store.store(group=f"schema/{group}", name=option, node=schema)


def share_when_copied() -> None:
    """A deep copy of the ConfigStore is the store itself. Hydra 1.3's config loader deep-copies its repository,
    the ConfigStore with it, for every listing and compose (`--help` lists every group: 193 copies, 1.6 s of CPU
    here); Hydra's main branch reads the live singleton instead (facebookresearch/hydra#2928, in no 1.3 release).
    Nothing writes through the copy: ConfigStore.load hands out a copy of the node it returns."""
    if "__deepcopy__" not in vars(ConfigStore):
        ConfigStore.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]
