"""trainer=fsdp read from the config: whether a run uses it, and the keys it takes (conf/trainer/fsdp.yaml), checked
when the config is composed: the strategy node is a `_target_` call, which Hydra's schema cannot type, so its keys
are listed here with their help."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from gptlab.config.suggest import did_you_mean

FSDP_TARGET = "gptlab.execution.strategies.fsdp"
FSDP_KEYS = {
    "reshard_after_forward": "free each block's gathered weights after forward (ZeRO-3); false keeps them (ZeRO-2)",
    "timeout": "collective timeout (a datetime.timedelta), handed to Lightning's ModelParallelStrategy",
    "process_group_backend": "gloo | nccl; default: nccl on CUDA, gloo on CPU",
}
# Keys trainer=fsdp once took (FSDP1's, Lightning's FSDPStrategy, and its own checkpointing switch) and what
# replaced each, as the way out the refusal offers.
FSDP1_KEYS = {
    "sharding_strategy": "drop it; trainer.strategy.reshard_after_forward=true (FULL_SHARD, the default) or false "
                         "(SHARD_GRAD_OP) chooses the sharding now",
    "state_dict_type": "drop it; checkpoints are always sharded (a folder with one file per rank)",
    "activation_checkpointing": "drop it; runtime.activation_checkpointing=true, false or selective (one switch for "
                                "every strategy; selective under trainer=fsdp unless set) chooses it now",
}


def fsdp_key_problem(keys: Iterable[str]) -> Optional[str]:
    """Why these trainer.strategy keys cannot configure trainer=fsdp (None: they can)."""
    keys = set(keys) - {"_target_"}
    old = sorted(keys & set(FSDP1_KEYS))
    if old:
        return "; ".join(f"trainer.strategy.{key} is gone (it was FSDP1's): {FSDP1_KEYS[key]}" for key in old) + "."
    unknown = sorted(keys - set(FSDP_KEYS))
    if unknown:
        return (f"trainer.strategy.{unknown[0]} is not a key of trainer=fsdp."
                f"{did_you_mean(unknown[0], FSDP_KEYS, 'trainer.strategy.')} It takes {', '.join(FSDP_KEYS)}; "
                "drop it or use one of them.")
    return None


def fsdp_strategy_keys(cfg: Any) -> Optional[str]:
    """A config rule: trainer=fsdp's strategy node holds only keys it takes."""
    strategy = (cfg.get("trainer") or {}).get("strategy")
    if hasattr(strategy, "get") and "_target_" not in strategy:  # `+trainer.strategy.<key>=` onto a named strategy
        keys = ", ".join(f"trainer.strategy.{key}" for key in strategy)
        fsdp = "trainer=fsdp's" if set(strategy) <= set(FSDP_KEYS) else "no shipped trainer's"
        return (f"{keys} configures {fsdp} strategy, but this trainer's strategy is a name (auto, ddp, ...) that "
                "takes no keys; add trainer=fsdp to shard the model, or drop the override.")
    if not hasattr(strategy, "get") or strategy.get("_target_") != FSDP_TARGET:
        return None
    return fsdp_key_problem(strategy.keys())


def uses_fsdp(trainer_cfg: Any) -> bool:
    """Whether a composed `trainer` group runs under gptlab's trainer=fsdp (sharded checkpoints, blocks checkpointed
    selectively unless runtime.activation_checkpointing is set)."""
    strategy = trainer_cfg.get("strategy") if trainer_cfg is not None else None
    return hasattr(strategy, "get") and strategy.get("_target_") == FSDP_TARGET


def is_fsdp(strategy: Any) -> bool:
    """Whether a trainer's `strategy` (a name, or a `_target_` node: gptlab's trainer=fsdp or Lightning's own) shards
    weights, grads and optimizer states over the ranks."""
    target = strategy.get("_target_", "") if hasattr(strategy, "get") else str(strategy or "")
    return "fsdp" in target.lower()
