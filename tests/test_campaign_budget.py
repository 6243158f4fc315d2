"""A run bounded by a budget, one key: `trainer.max_steps=${gptlab.budget_steps:tokens,N}` or `...:flops,N` trains
on that many tokens or training FLOPs, so a wider variant gets fewer steps at one FLOPs budget."""

from __future__ import annotations

import math

import pytest
from helpers import TINY, compose_config

from gptlab.config import ladder_steps  # noqa: F401  (registers the resolvers, as train does)
from gptlab.model import GPTConfig
from gptlab.model.accounting import training_flops_per_token


def steps(*overrides: str) -> int:
    return int(compose_config([*TINY, *overrides]).trainer.max_steps)


def test_a_tokens_budget_and_a_flops_budget_set_the_steps() -> None:
    per_step = 4 * 32  # TINY's data.batch_size x model.block_size
    assert steps("trainer.max_steps=${gptlab.budget_steps:tokens,12800}") == 12800 // per_step
    narrow = steps("trainer.max_steps=${gptlab.budget_steps:flops,1e9}")
    wide = steps("trainer.max_steps=${gptlab.budget_steps:flops,1e9}", "model.n_embd=64")
    cfg = compose_config([*TINY, "model.n_embd=64"])
    model = GPTConfig.for_tokenizer(dict(cfg.model), 256)
    assert wide == math.ceil(1e9 / (per_step * training_flops_per_token(model)["total"])) and wide < narrow


def test_a_budget_of_another_kind_is_refused_with_the_spelling() -> None:
    with pytest.raises(Exception, match=r"a budget is tokens or flops.*budget_steps:flops,1e12"):
        steps("trainer.max_steps=${gptlab.budget_steps:seconds,60}")


def test_training_and_the_report_import_no_campaign_store() -> None:
    """MLflow and online-fdr are the campaign extra's: a run or a report that names no campaign never loads them."""
    from test_layout import _loaded_modules

    loaded = _loaded_modules("import gptlab.apps.train, gptlab.report.sweep, gptlab.report.verdicts_json")
    assert not [m for m in loaded if m.startswith(("mlflow", "online_fdr", "gptlab.campaign"))]
