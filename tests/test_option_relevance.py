"""An option set where the chosen model, data store, optimizer or schedule ignores it is refused in a single run
(a warning in a sweep job, where a shared value may apply to some jobs only), naming the option and what it needs;
a warmup longer than the run is a warning."""

from __future__ import annotations

import pytest
from helpers import TINY, compose_config

from gptlab.errors import ConfigError
from gptlab.preflight.early_checks import check_config
from gptlab.preflight.option_relevance import RULES

# (overrides, the message's start). One per row of RULES, each the smallest config that sets the option in vain.
IGNORED = [
    (["model.activation=swiglu", "model.mlp_layers=1"],
     "model.activation='swiglu' has no effect: it matters only when model.mlp_layers >= 2"),
    (["model.d_ff=64", "model.mlp_layers=1"], "model.d_ff=64 has no effect: it matters only when model.mlp_layers"),
    (["model.rope_theta=500000"], "model.rope_theta=500000.0 has no effect: it matters only when model.pos_emb=rope; "
                                  "here model.pos_emb='learned'."),
    (["model.rope_fraction=0.25", "model.pos_emb=alibi"], "model.rope_fraction=0.25 has no effect: it matters only "
                                                          "when model.pos_emb=rope; here model.pos_emb='alibi'."),
    (["model.sinusoidal_scale=1.0"], "model.sinusoidal_scale=1.0 has no effect: it matters only when "
                                     "model.pos_emb=sinusoidal; here model.pos_emb='learned'."),
    (["model.attn_window=8"], "model.attn_window=8 has no effect: it matters only when model.attn_pattern has a "
                              "local or strided layer; here model.attn_pattern=['dense']."),
    (["model.attn_impl=chunked"], "model.attn_impl='chunked' has no effect"),
    (["model.value_embed_gate=true"], "model.value_embed_gate=True has no effect: it matters only when "
                                      "model.value_embed_layers is not empty"),
    (["model.mtp_weights_end=[]"], "model.mtp_weights_end=[] has no effect: it matters only when model.mtp_weights "
                                   "is not empty"),
    (["data.shard_tokens=1000"], "data.shard_tokens=1000 has no effect: it matters only when data.store=prepared; "
                                 "here data.store='memory'."),
    (["data.verify_sha256=false"], "data.verify_sha256=False has no effect"),
    (["data.val_windows=8"], "data.val_windows=8 has no effect: it matters only when data.store=streaming"),
    (["data.store=streaming", "data.sampling=epoch"], "data.sampling='epoch' has no effect"),
    (["data.sampling=epoch", "data.samples_per_epoch=10"], "data.samples_per_epoch=10 has no effect: it matters "
                                                           "only when data.sampling=random"),
    (["model.mup_base_width=64"], "model.mup_base_width=64 has no effect: it matters only when "
                                  "model.parametrization=mup"),
    (["optimizer=sgd", "optimizer.momentum=0.0"], "optimizer.nesterov=True has no effect: it matters only when "
                                                  "optimizer.momentum > 0; here optimizer.momentum=0.0."),
    (["callbacks.text_samples.temperature=0", "callbacks.text_samples.top_k=5"],
     "callbacks.text_samples.top_k=5 has no effect: it matters only when callbacks.text_samples.temperature > 0"),
    (["callbacks.zero_shot.limit=20"], "callbacks.zero_shot.limit=20 has no effect: it matters only when "
                                       "callbacks.zero_shot.tasks is not empty"),
    (["callbacks.zero_shot.every_n_steps=10"], "callbacks.zero_shot.every_n_steps=10 has no effect"),
    (["model.untie_at=0.5", "model.tie_weights=false"], "model.untie_at=0.5 has no effect: it matters only when "
                                                         "model.tie_weights=true"),
    (["stages.windows=[64]"], "stages.windows=[64] has no effect: it matters only when model.attn_pattern has a "
                              "local or short layer"),
    (["stages.batch_lr_exponent=1.0"], "stages.batch_lr_exponent=1.0 has no effect: it matters only when "
                                       "stages.batch_sizes is set"),
    (["runtime.float8_layers=[mlp,head]"], "runtime.float8_layers=['mlp', 'head'] has no effect: it matters only "
                                           "when runtime.float8 is true"),
    (["runtime.compile_scope=blocks", "runtime.compile=false"], "runtime.compile_scope='blocks' has no effect: it "
                                                                "matters only when runtime.compile=true"),
]


def test_every_rule_has_an_example() -> None:
    refused = {rule.option for rule in RULES if not rule.warn}
    assert refused == {msg.split("=", 1)[0] for _, msg in IGNORED}


@pytest.mark.parametrize(("overrides", "message"), IGNORED)
def test_an_ignored_option_is_refused_in_a_single_run(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_config(compose_config([*TINY, *overrides], "/tmp/unused"))
    assert str(caught.value).startswith(message), caught.value
    key = message.split("=", 1)[0]
    assert f"Drop {key} (or set {key}=" in str(caught.value) and "), or change " in str(caught.value)


@pytest.mark.parametrize("overrides", [
    ["model.activation=swiglu", "model.mlp_layers=3"],  # the option's condition holds
    ["model.rope_theta=500000", "model.pos_emb=rope"],
    ["model.rope_theta=10000.0"],  # the neutral default, set explicitly: asks for nothing
    ["model.attn_window=8", "model.attn_pattern=[dense,local]"],
    ["model.value_embed_gate=true", "model.value_embed_layers=[0]"],
    ["model=speedrun_nano", "model.n_layer=4"],  # every choice on (its layer lists need 4 blocks): none in vain
    ["data.store=streaming", "data.val_windows=8"],
    ["optimizer=sgd", "optimizer.momentum=0.0", "optimizer.nesterov=false"],
    ["callbacks.text_samples.temperature=0"],  # the schema's top_k (40), not asked for: greedy as asked
    ["callbacks.text_samples.top_k=5"],
    ["callbacks.zero_shot.tasks=[lambada]", "callbacks.zero_shot.limit=20"],
])
def test_an_option_that_matters_passes(overrides: list[str]) -> None:
    check_config(compose_config([*TINY, *overrides], "/tmp/unused"))


def test_in_a_sweep_job_an_ignored_option_is_a_warning(monkeypatch) -> None:
    monkeypatch.setattr("gptlab.runs.sweep_jobs.in_sweep_job", lambda: True)
    warnings = check_config(compose_config([*TINY, "model.rope_theta=500000"], "/tmp/unused"))
    assert warnings == ["model.rope_theta=500000.0 has no effect: it matters only when model.pos_emb=rope; "
                        "here model.pos_emb='learned'."]


def test_a_warmup_longer_than_the_run_is_a_warning() -> None:
    warnings = check_config(compose_config([*TINY, "scheduler.warmup_steps=100", "trainer.max_steps=30"],
                                           "/tmp/unused"))
    assert warnings == ["scheduler.warmup_steps=100 never ends in this run of trainer.max_steps=30 steps: the lr "
                        "never reaches its peak (optimizer.lr); give scheduler.warmup_steps below trainer.max_steps."]
    # issue 54: a 6-step run read "... only when ... (a run of more than 5 steps); here trainer.max_steps=6"
    (six,) = check_config(compose_config([*TINY, "scheduler.warmup_steps=20", "trainer.max_steps=6"], "/tmp/unused"))
    assert "more than" not in six and "trainer.max_steps=6 steps" in six, six
    assert check_config(compose_config([*TINY, "scheduler.warmup_steps=2", "trainer.max_steps=3"], "/tmp/unused")) == []


@pytest.mark.parametrize("max_steps", [2, 4])
def test_a_smoke_run_is_not_warned_about_its_warmup(max_steps: int) -> None:
    """The docs' 2- and 4-step commands keep the preset's warmup (20 steps): not a mistake worth a warning."""
    assert check_config(compose_config(["trainer.max_steps=" + str(max_steps)], "/tmp/unused")) == []


def test_validation_switched_off_is_a_warning() -> None:
    """trainer.limit_val_batches=0 used to train without a word, and the summary's best_val_loss was null."""
    warnings = check_config(compose_config([*TINY, "trainer.limit_val_batches=0"], "/tmp/unused"))
    assert len(warnings) == 1 and warnings[0].startswith("trainer.limit_val_batches=0 turns validation off")
    assert "best_val_loss stays null" in warnings[0]
    assert check_config(compose_config([*TINY, "trainer.limit_val_batches=3"], "/tmp/unused")) == []
