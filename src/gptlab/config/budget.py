"""`budget=KIND:AMOUNT`, the one key that bounds a run: `tokens:2e6` or `flops:1e12` trains the steps that amount
buys (trainer.max_steps is set from it: ⌈amount / (tokens per step × FLOPs per token)⌉, so at one FLOPs budget a
wider variant trains fewer steps), `seconds:300` trains for 300 seconds of training steps (validation not counted)
with the lr schedule laid over those seconds (gptlab.train.callbacks.time_budget). A campaign's verdicts compare
arms at a matched budget (docs/campaigns.md#budgets).

Applied to the job's config when its training starts (`apply`), so config_resolved.yaml shows the steps it set; the
format is checked with the rest of the config, before Lightning is imported."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from gptlab.errors import ConfigError, is_number

KINDS = ("tokens", "flops", "seconds")
# A seconds budget ends the run itself; trainer.max_steps is set this high so that no step count ends it first.
SECONDS_STEP_CEILING = 10**9
SCHEDULES = "gptlab.train.optim."  # the schedules a seconds budget can lay over time: LambdaLRs of a step
EXAMPLE = "budget=tokens:2e6, budget=flops:1e12 or budget=seconds:300"


@dataclass(frozen=True)
class Budget:
    kind: str  # one of KINDS
    amount: float

    def __str__(self) -> str:
        return f"{self.kind}:{self.amount:g}"


def parse(field: str, value: Any) -> Budget:
    """`KIND:AMOUNT` as a Budget; anything else is one ConfigError naming the field and the three forms."""
    kind, _, amount = str(value).partition(":")
    try:
        number = float(amount)
    except ValueError:
        number = math.nan
    if kind not in KINDS or not is_number(number) or not math.isfinite(number) or number <= 0:
        raise ConfigError(f"{field}={value!r} is invalid: use KIND:AMOUNT with KIND one of {', '.join(KINDS)} and a "
                          f"positive AMOUNT, e.g. {EXAMPLE} (docs/campaigns.md#budgets).")
    return Budget(kind, number)


def check(field: str, value: Any) -> None:
    """The schema's range check of `budget` (gptlab.config.schemas.Train)."""
    if value is not None:
        parse(field, value)


def of(cfg: DictConfig) -> Optional[Budget]:
    value = cfg.get("budget")
    return None if value is None else parse("budget", value)


def model_and_step(cfg: DictConfig) -> tuple[dict[str, Any], int, int]:
    """The composed model's values, its vocabulary (the preset's, else the tokenizer's) and the tokens of one
    optimizer step: global_batch_tokens, else data.batch_size × model.block_size (one device, no accumulation)."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    assert isinstance(model, dict)
    vocab = model.get("vocab_size")
    if vocab is None:
        from hydra.utils import instantiate

        vocab = instantiate(cfg.tokenizer).vocab_size
    return model, vocab, cfg.get("global_batch_tokens") or cfg.data.batch_size * model["block_size"]


def steps_for(budget: Budget, cfg: DictConfig) -> int:
    """Optimizer steps a tokens or FLOPs budget buys; FLOPs per token as the report counts them (6N + attention,
    forward and backward: gptlab.model.accounting)."""
    from gptlab.model import GPTConfig
    from gptlab.model.accounting import training_flops_per_token

    model, vocab, per_step = model_and_step(cfg)
    per_token = training_flops_per_token(GPTConfig.for_tokenizer(model, vocab))["total"] \
        if budget.kind == "flops" else 1
    return max(1, math.ceil(budget.amount / (per_step * per_token)))


def seconds_without_step_plans(cfg: DictConfig) -> Optional[str]:
    """Why a seconds budget cannot run with this config (gptlab.config.rules): a schedule it cannot stretch over
    time, or schedules planned over the run's steps (stages.*, model.untie_at), which have no step count to fall on."""
    bound = of(cfg)
    if bound is None or bound.kind != "seconds":
        return None
    value = cfg.get("budget")  # as typed, for the message
    target = str((cfg.get("scheduler") or {}).get("_target_", SCHEDULES))
    if not target.startswith(SCHEDULES):
        return (f"budget={value} lays the lr schedule over seconds, which it does for gptlab's schedules "
                f"(scheduler=cosine, wsd or constant: {SCHEDULES}*), not scheduler._target_={target}; use one of "
                "them, or a tokens or flops budget (e.g. budget=tokens:2e6).")
    stages, model = cfg.get("stages") or {}, cfg.get("model") or {}
    planned = [f"stages.{k}" for k in ("windows", "seq_lens", "batch_sizes") if stages.get(k)]
    planned += ["model.untie_at"] if model.get("untie_at") is not None else []
    if planned:
        return (f"budget={value} lays the lr schedule over seconds, but {', '.join(planned)} "
                f"{'is' if len(planned) == 1 else 'are'} planned over the run's steps, which a time budget does not "
                "fix in advance; use a tokens or flops budget (e.g. budget=tokens:2e6), or drop "
                f"{', '.join(planned)}.")
    return None


def apply(cfg: DictConfig) -> Optional[Budget]:
    """Sets trainer.max_steps from the budget (the ceiling SECONDS_STEP_CEILING for a seconds budget, which
    ends the run itself); returns the budget, None when there is none."""
    budget = of(cfg)
    if budget is not None:
        steps = SECONDS_STEP_CEILING if budget.kind == "seconds" else steps_for(budget, cfg)
        with open_dict(cfg):
            cfg.trainer.max_steps = steps
    return budget
