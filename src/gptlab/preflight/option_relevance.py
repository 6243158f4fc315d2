"""Options that only matter when another option has a certain value, as one table: a value set where it has no
effect (`model.rope_theta` with learned positions, `model.activation=swiglu` with a one-layer MLP, which has no
activation) would otherwise train something other than what the user asked for, in silence.

A row's option counts as set when its value differs from its neutral default (its schema's default; no warmup;
no Nesterov). A set option whose condition does not hold is refused in a single run; in a
sweep job it is a warning, since a value shared by every job may apply to some of them only (ablate_attention's
attn_window and its all-dense job). `warn` rows are warnings everywhere: the run still does what was asked, it
just never gets to part of it (a warmup longer than a smoke test).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf

from gptlab.config.callbacks import TextSamples, ZeroShotEval
from gptlab.config.copies import default_of
from gptlab.config.fields import schema_fields
from gptlab.config.schemas import Data, Runtime, Stages, Trainer
from gptlab.data import mixture
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.model.generation import SamplingOptions
from gptlab.model.sparse_attention import is_sparse

Get = Callable[[str], Any]  # a dotted key of the train config -> its value (None if absent)
# trainer.limit_val_batches that asks for nothing: every validation batch, its schema's default.
ALL_VAL_BATCHES = default_of(schema_fields(Trainer)["limit_val_batches"])
SCHEMAS = {"data": Data, "runtime": Runtime, "stages": Stages, "callbacks.text_samples": TextSamples,
           "callbacks.zero_shot": ZeroShotEval}


@dataclass(frozen=True)
class OnlyWhen:
    option: str  # the dotted key that may be set in vain
    condition: str  # when it matters, as the user would write it
    holds: Callable[[Get], bool]
    shown: tuple[str, ...]  # the keys the condition reads, quoted in the message
    warn: bool = False  # True: a warning even in a single run
    effect: str = "has no effect"  # what happens to the option's value when the condition does not hold
    says: str = ""  # the whole message instead of the one made from the fields above ({value} is the option's value)


def _sparse_layers(get: Get) -> bool:
    return any(is_sparse(kind) for kind in get("model.attn_pattern") or [])


def _windowed_layers(get: Get) -> bool:
    return any(kind in ("local", "short") for kind in get("model.attn_pattern") or [])


def _momentum(get: Get) -> bool:
    return (get("optimizer.momentum") or 0) > 0


SMOKE_RUN_STEPS = 5  # a run this short checks that things run (the docs' 2- and 4-step commands): its lr is no point


def _warmup_ends(get: Get) -> bool:
    """Also true of a smoke run: warning that its warmup never ends would only be noise on every short command."""
    max_steps = get("trainer.max_steps")
    return max_steps is None or max_steps < 0 or max_steps <= SMOKE_RUN_STEPS \
        or get("scheduler.warmup_steps") < max_steps


def _validates(get: Get) -> bool:
    return get("trainer.limit_val_batches") != 0


def greedy_ignores(prefix: str, options: tuple[str, ...]) -> tuple[OnlyWhen, ...]:
    """Temperature 0 is greedy decoding (eq. 11): the argmax, which no top-k or nucleus filter changes. One rule for
    every place that samples: the training samples (callbacks.text_samples) and sample.py."""
    temperature = f"{prefix}temperature"
    return tuple(OnlyWhen(f"{prefix}{name}", f"{temperature} > 0 ({temperature}=0 is greedy decoding, the argmax, "
                          f"which {name} does not change)", lambda g: (g(temperature) or 0) > 0, (temperature,))
                 for name in options)


def tasks_only(prefix: str, options: tuple[str, ...]) -> tuple[OnlyWhen, ...]:
    """Zero-shot task settings do nothing without tasks to score: one rule for eval.py and callbacks.zero_shot."""
    tasks = f"{prefix}tasks"
    return tuple(OnlyWhen(f"{prefix}{name}", f"{tasks} is not empty (e.g. {tasks}=[lambada])",
                          lambda g: bool(g(tasks)), (tasks,)) for name in options)


RULES: tuple[OnlyWhen, ...] = (
    OnlyWhen("model.rope_theta", "model.pos_emb=rope", lambda g: g("model.pos_emb") == "rope", ("model.pos_emb",)),
    OnlyWhen("model.rope_fraction", "model.pos_emb=rope", lambda g: g("model.pos_emb") == "rope", ("model.pos_emb",)),
    OnlyWhen("model.sinusoidal_scale", "model.pos_emb=sinusoidal", lambda g: g("model.pos_emb") == "sinusoidal",
             ("model.pos_emb",)),
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
    OnlyWhen("model.value_embed_gate", "model.value_embed_layers is not empty (e.g. model.value_embed_layers=[0])",
             lambda g: bool(g("model.value_embed_layers")), ("model.value_embed_layers",)),
    OnlyWhen("model.mtp_weights_end", "model.mtp_weights is not empty (e.g. model.mtp_weights=[0.5])",
             lambda g: bool(g("model.mtp_weights")), ("model.mtp_weights",)),
    OnlyWhen("data.shard_tokens", "data.store=prepared", lambda g: g("data.store") == "prepared", ("data.store",)),
    OnlyWhen("data.verify_sha256", "data.store=prepared", lambda g: g("data.store") == "prepared", ("data.store",)),
    OnlyWhen("data.val_windows", "data.store=streaming", lambda g: g("data.store") == "streaming", ("data.store",)),
    OnlyWhen("data.sampling", "data.store=memory or prepared (streaming reads its documents in order)",
             lambda g: g("data.store") != "streaming", ("data.store",)),
    OnlyWhen("data.samples_per_epoch", "data.sampling=random, or with either sampling in a mixture",
             lambda g: (g("data.sampling") == "random" or g("data.source._target_") == mixture.TARGET)
             and g("data.store") != "streaming", ("data.sampling", "data.store")),
    OnlyWhen("optimizer.nesterov", "optimizer.momentum > 0", _momentum, ("optimizer.momentum",)),
    OnlyWhen("scheduler.warmup_steps", "scheduler.warmup_steps < trainer.max_steps", _warmup_ends,
             ("trainer.max_steps",), warn=True,
             says="scheduler.warmup_steps={value!r} never ends in this run of {now} steps: the lr never reaches "
                  "its peak (optimizer.lr); give scheduler.warmup_steps below trainer.max_steps."),
    OnlyWhen("trainer.limit_val_batches", "trainer.limit_val_batches > 0", _validates, (), warn=True,
             says="trainer.limit_val_batches={value!r} turns validation off: no val/loss is computed, the summary's "
                  "best_val_loss stays null, and checkpoints are not chosen by val/loss (only last.ckpt is kept); "
                  "leave trainer.limit_val_batches out (1.0) or give it a number of batches > 0."),
    OnlyWhen("model.untie_at", "model.tie_weights=true (only a tied head can be untied)",
             lambda g: g("model.tie_weights") is True, ("model.tie_weights",)),
    OnlyWhen("stages.windows", "model.attn_pattern has a local or short layer (dense layers see every earlier key)",
             _windowed_layers, ("model.attn_pattern",)),
    OnlyWhen("stages.batch_lr_exponent", "stages.batch_sizes is set (the lr follows the batch size's stages)",
             lambda g: bool(g("stages.batch_sizes")), ("stages.batch_sizes",)),
    OnlyWhen("runtime.float8_layers", "runtime.float8 is true (a GPU with float8: compute capability >= 8.9)",
             lambda g: g("runtime.float8") is True,
             ("runtime.float8",)),
    OnlyWhen("runtime.compile_scope", "runtime.compile=true (on by default on CUDA GPUs only)",
             lambda g: g("runtime.compile") is True, ("runtime.compile",)),
    *greedy_ignores("callbacks.text_samples.", ("top_k",)),
    *tasks_only("callbacks.zero_shot.", ("limit", "every_n_steps")),
)

# sample.py's options (conf/sample.yaml): the same sampling rule, refused there (a single run).
SAMPLE_RULES: tuple[OnlyWhen, ...] = greedy_ignores("", ("top_k", "top_p"))

# eval.py's options (conf/eval.yaml).
EVAL_RULES: tuple[OnlyWhen, ...] = (
    *tasks_only("", ("task_limit",)),
    OnlyWhen("trainer.limit_val_batches", "val_loss=false", lambda g: not g("val_loss") or _validates(g), ("val_loss",),
             says="trainer.limit_val_batches={value!r} scores no validation batch, so val_loss=true would compute "
                  "nothing."),
)


def neutral_defaults() -> dict[str, Any]:
    """The value of each row's option that asks for nothing: its schema's default (GPTConfig is the model's), so a
    changed default there is followed here."""
    model = {f"model.{f.name}": default_of(f) for f in dataclasses.fields(GPTConfig)}
    others = {f"{prefix}.{name}": default_of(f) for prefix, schema in SCHEMAS.items()
              for name, f in schema_fields(schema).items()}
    return {**model, **others, "optimizer.nesterov": False, "scheduler.warmup_steps": 0,
            "trainer.limit_val_batches": ALL_VAL_BATCHES}


def eval_defaults() -> dict[str, Any]:
    """eval.py's neutral values (conf/eval.yaml): no task limit, all val batches."""
    return {"task_limit": None, "trainer.limit_val_batches": ALL_VAL_BATCHES}


def sampling_defaults() -> dict[str, Any]:
    """sample.py's neutral values: the decoder's own (no filter)."""
    return {f.name: f.default for f in dataclasses.fields(SamplingOptions)}


def as_typed(value: Any) -> str:
    """A value as a command line types it (`null`, `false`, `[dense,local]`): a group's YAML may set the option
    (optimizer=sgd's nesterov), so dropping it from the command is not always a way out."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(as_typed(v) for v in value) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def ignored_options(cfg: DictConfig, in_sweep_job: bool, rules: tuple[OnlyWhen, ...] = RULES,
                    defaults: Optional[dict[str, Any]] = None) -> list[str]:
    """Raises ConfigError for the first refused row of `rules` (the train config's unless told); returns the
    warnings (one line per ignored option). `defaults`: the neutral values, neutral_defaults() unless told."""
    def get(key: str) -> Any:
        value = OmegaConf.select(cfg, key, default=None)
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    defaults = neutral_defaults() if defaults is None else defaults
    warnings = []
    for rule in rules:
        value = get(rule.option)
        if value is None or value == defaults.get(rule.option) or rule.holds(get):
            continue
        now = ", ".join(f"{key}={get(key)!r}" for key in rule.shown)
        message = rule.says.format(value=value, now=now) if rule.says else \
            f"{rule.option}={value!r} {rule.effect}: it matters only when {rule.condition}; here {now}."
        if rule.warn or in_sweep_job:
            warnings.append(message)
        else:
            neutral = f"{rule.option}={as_typed(defaults.get(rule.option))}"
            raise ConfigError(f"{message} Drop {rule.option} (or set {neutral}), or change {' / '.join(rule.shown)}.")
    return warnings
