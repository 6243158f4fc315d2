"""Building a config node that a file records (a checkpoint's run config, a run or sweep dir's config_resolved.yaml,
an exported model's config.json): a recorded config is data, not code. Hydra's instantiate imports and calls whatever
`_target_` a node names, nested nodes too (Hydra 1.3 blocks os.system and shutil.rmtree, not numpy.savetxt), so a
file from elsewhere could run anything. Here every `_target_` in a recorded node must be one of gptlab's own classes
for that kind of node, or one the user trusts by name in GPTLAB_TRUSTED_TARGETS (docs/checkpoints.md); anything
else is refused in one line naming the file and the target, before anything is imported.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Mapping, Optional

from gptlab.errors import ConfigError

TRUSTED_ENV = "GPTLAB_TRUSTED_TARGETS"  # comma-separated `_target_` paths the user adds (their own classes)

# gptlab's classes per kind of node, as conf/ names them (tests/test_recorded_code.py checks they agree).
TOKENIZERS = frozenset({"gptlab.data.tokenizers.ByteTokenizer", "gptlab.data.tokenizers.TiktokenTokenizer"})
DATA = frozenset({"gptlab.data.GPTDataModule", "gptlab.data.mixture.Mixture", "gptlab.data.sources.BuiltinSource",
                  "gptlab.data.sources.TextFiles", "gptlab.data.sources.HFDataset"})
CALLBACKS = frozenset({f"gptlab.train.callbacks.{name}" for name in (
    "ModelCheckpoint", "HParamsSummary", "LossSpikeGuard", "MixtureTokens", "RankConsistencyCheck", "TextSamples",
    "StabilityProbes", "TokenThroughput", "ZeroShotEval", "progress.StepProgressBar",
    "preemption.PreemptionCheckpoint")})
OPTIMIZERS = frozenset({"gptlab.train.optim.adamw", "gptlab.train.muon.muon", "gptlab.train.normuon.normuon",
                        "torch.optim.SGD",
                        "torch.optim.Adafactor"})
SCHEDULES = frozenset({"gptlab.train.optim.warmup_cosine", "gptlab.train.optim.warmup_stable_decay",
                       "gptlab.train.optim.constant"})
# What a node of each kind may name, nested nodes included (a data node holds its sources and tokenizer).
KINDS = {"tokenizer": TOKENIZERS, "data": DATA | TOKENIZERS, "callback": CALLBACKS, "optimizer": OPTIMIZERS,
         "scheduler": SCHEDULES}


def user_trusted() -> frozenset[str]:
    """The `_target_` paths the user added in GPTLAB_TRUSTED_TARGETS."""
    return frozenset(t.strip() for t in os.environ.get(TRUSTED_ENV, "").split(",") if t.strip())


def _targets(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(key path, `_target_` value) of `node` and every node inside it, lists included."""
    if isinstance(node, Mapping):
        if "_target_" in node:
            yield f"{where}._target_" if where else "_target_", node["_target_"]
        for key, value in node.items():
            yield from _targets(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _targets(value, f"{where}[{i}]")


def check_recorded(node: Any, kind: str, source: str) -> None:
    """Refuses `node` (a `kind` node recorded in the file `source`) if any `_target_` in it is not trusted."""
    allowed = KINDS[kind] | user_trusted()
    for where, target in _targets(node, ""):
        if not isinstance(target, str) or target not in allowed:
            raise ConfigError(
                f"{source} records the {kind} _target_ {target!r} (at {where}), which gptlab does not build from a "
                f"recorded config: a file names data, not code to run (gptlab's own: {', '.join(sorted(KINDS[kind]))})"
                f"; if you trust that class, add it to {TRUSTED_ENV} (comma-separated) and run again.")


def build_recorded(node: Optional[Mapping[str, Any]], kind: str, source: str, **kwargs: Any) -> Any:
    """The object a recorded `kind` node describes, built by Hydra once `check_recorded` passed it."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    check_recorded(plain, kind, source)
    return instantiate(plain, **kwargs)
