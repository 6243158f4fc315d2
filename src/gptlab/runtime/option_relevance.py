"""Options that only matter when another option has a certain value, as one table: a value set where it has no
effect (`model.rope_theta` with learned positions, `model.activation=swiglu` with a one-layer MLP, which has no
activation) would otherwise train something other than what the user asked for, in silence.

A row's option counts as set when its value differs from its neutral default (GPTConfig's and the DataModule's
defaults; no warmup; no Nesterov). A set option whose condition does not hold is refused in a single run; in a
sweep job it is a warning, since a value shared by every job may apply to some of them only (ablate_attention's
attn_window and its all-dense job). `warn` rows are warnings everywhere: the run still does what was asked, it
just never gets to part of it (a warmup longer than a smoke test).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from gptlab.errors import ConfigError
from gptlab.model import GPTConfig

Get = Callable[[str], Any]  # a dotted key of the train config -> its value (None if absent)
SPARSE = ("local", "strided")


@dataclass(frozen=True)
class OnlyWhen:
    option: str  # the dotted key that may be set in vain
    condition: str  # when it matters, as the user would write it
    holds: Callable[[Get], bool]
    shown: tuple[str, ...]  # the keys the condition reads, quoted in the message
    warn: bool = False  # True: a warning even in a single run
    effect: str = "has no effect"  # what happens to the option's value when the condition does not hold


def _sparse_layers(get: Get) -> bool:
    return any(kind in SPARSE for kind in get("model.attn_pattern") or [])


def _momentum(get: Get) -> bool:
    return (get("optimizer.momentum") or 0) > 0


SMOKE_RUN_STEPS = 5  # a run this short checks that things run (the docs' 2- and 4-step commands): its lr is no point


def _warmup_ends(get: Get) -> bool:
    """Also true of a smoke run: warning that its warmup never ends would only be noise on every short command."""
    max_steps = get("trainer.max_steps")
    return max_steps is None or max_steps < 0 or max_steps <= SMOKE_RUN_STEPS \
        or get("scheduler.warmup_steps") < max_steps


RULES: tuple[OnlyWhen, ...] = (
    OnlyWhen("model.rope_theta", "model.pos_emb=rope", lambda g: g("model.pos_emb") == "rope", ("model.pos_emb",)),
    OnlyWhen("model.rope_fraction", "model.pos_emb=rope", lambda g: g("model.pos_emb") == "rope", ("model.pos_emb",)),
    OnlyWhen("model.activation", "model.mlp_layers >= 2 (a one-layer MLP is one linear map, with no activation)",
             lambda g: g("model.mlp_layers") >= 2, ("model.mlp_layers",)),
    OnlyWhen("model.d_ff", "model.mlp_layers >= 2 (d_ff is the width between MLP layers)",
             lambda g: g("model.mlp_layers") >= 2, ("model.mlp_layers",)),
    OnlyWhen("model.attn_window", "model.attn_pattern has a local or strided layer", _sparse_layers,
             ("model.attn_pattern",)),
    OnlyWhen("model.attn_impl", "model.attn_pattern has a local or strided layer (dense layers use SDPA's causal "
             "kernel whatever attn_impl says)", _sparse_layers, ("model.attn_pattern",)),
    OnlyWhen("model.mup_base_width", "model.parametrization=mup", lambda g: g("model.parametrization") == "mup",
             ("model.parametrization",)),
    OnlyWhen("data.shard_tokens", "data.store=prepared", lambda g: g("data.store") == "prepared", ("data.store",)),
    OnlyWhen("data.verify_sha256", "data.store=prepared", lambda g: g("data.store") == "prepared", ("data.store",)),
    OnlyWhen("data.val_windows", "data.store=streaming", lambda g: g("data.store") == "streaming", ("data.store",)),
    OnlyWhen("data.sampling", "data.store=memory or prepared (streaming reads its documents in order)",
             lambda g: g("data.store") != "streaming", ("data.store",)),
    OnlyWhen("data.samples_per_epoch", "data.sampling=random",
             lambda g: g("data.sampling") == "random" and g("data.store") != "streaming",
             ("data.sampling", "data.store")),
    OnlyWhen("optimizer.nesterov", "optimizer.momentum > 0", _momentum, ("optimizer.momentum",)),
    OnlyWhen("scheduler.warmup_steps", f"scheduler.warmup_steps < trainer.max_steps (a run of more than "
             f"{SMOKE_RUN_STEPS} steps)", _warmup_ends,
             ("trainer.max_steps",), warn=True, effect="never ends (the lr never reaches its peak, optimizer.lr)"),
)


def neutral_defaults() -> dict[str, Any]:
    """The value of each row's option that asks for nothing: read from GPTConfig and GPTDataModule themselves, so
    a changed default there is followed here."""
    from gptlab.data import GPTDataModule

    model = {f"model.{f.name}": f.default for f in dataclasses.fields(GPTConfig)
             if f.default is not dataclasses.MISSING}
    data = {f"data.{name}": p.default for name, p in inspect.signature(GPTDataModule.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}
    return {**model, **data, "optimizer.nesterov": False, "scheduler.warmup_steps": 0}


def ignored_options(cfg: DictConfig, in_sweep_job: bool) -> list[str]:
    """Raises ConfigError for the first refused row; returns the warnings (one line per ignored option)."""
    def get(key: str) -> Any:
        value = OmegaConf.select(cfg, key, default=None)
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    defaults = neutral_defaults()
    warnings = []
    for rule in RULES:
        value = get(rule.option)
        if value is None or value == defaults.get(rule.option) or rule.holds(get):
            continue
        now = ", ".join(f"{key}={get(key)!r}" for key in rule.shown)
        message = f"{rule.option}={value!r} {rule.effect}: it matters only when {rule.condition}; here {now}."
        if rule.warn or in_sweep_job:
            warnings.append(message)
        else:
            raise ConfigError(f"{message} Drop {rule.option}, or change {' / '.join(rule.shown)}.")
    return warnings
