"""experiment=ablate_gpt2_to_llama is a ladder (one change per rung, ending LLaMA-style) and
experiment=ablate_stability crosses the settings where post-LN is known to fail."""

from __future__ import annotations

import itertools

from helpers import ROOT, compose_config
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from gptlab.interop.llama import llama_inexpressible
from gptlab.model import GPT, GPTConfig


def sweep(experiment: str) -> tuple[dict, dict[str, list]]:
    cfg = compose_config([f"experiment={experiment}"])
    params = OmegaConf.to_container(cfg.hydra.sweeper.params) if "hydra" in cfg else None
    if params is None:  # compose_config may drop the hydra node: read the experiment file itself
        params = OmegaConf.load(ROOT / "conf" / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return cfg, {o.get_key_element(): list(o.sweep_iterator()) for o in parsed}


def model_of(*overrides: str) -> GPTConfig:
    cfg = compose_config(["experiment=ablate_gpt2_to_llama", *overrides])
    return GPTConfig.from_dict({**OmegaConf.to_container(cfg.model, resolve=True), "vocab_size": 257})


def test_ladder_changes_one_field_per_rung_and_ends_llama_style() -> None:
    _, params = sweep("ablate_gpt2_to_llama")
    rungs = params["+rung"]
    assert rungs == ["gpt2", "rope", "rmsnorm", "swiglu", "no_bias", "untied", "qk_norm"]
    models = [model_of(f"+rung={r}") for r in rungs]
    assert models[0] == model_of()  # rung 0 is the experiment's own GPT-2 recipe
    for before, after in itertools.pairwise(models):
        changed = {k for k, v in before.to_dict().items() if after.to_dict()[k] != v} - {"d_ff", "qkv_bias"}
        assert len(changed) == 1 or changed == {"attn_bias", "mlp_bias"}, changed  # "biases" is one step
    assert llama_inexpressible(models[-2]) == ""  # rung `untied` is exactly a LlamaForCausalLM
    assert models[-1].qk_norm and GPT(models[-1]).num_parameters() > 0


def test_stability_sweep_has_post_ln_without_warmup_at_high_lr() -> None:
    cfg, params = sweep("ablate_stability")
    assert params["model.norm"] == ["pre", "post"] and 0 in params["scheduler.warmup_steps"]
    assert max(params["optimizer.lr"]) >= 1e-2 and params["model.qk_norm"] == [False, True]
    assert params["model.z_loss"][0] == 0 and params["model.z_loss"][1] > 0
    assert cfg.callbacks.stability_probes.every_n_steps <= cfg.trainer.max_steps // 10
