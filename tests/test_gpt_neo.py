"""GPT-Neo, EleutherAI's GPT-3 replica, as the peer reference for alternating dense/local attention."""

from __future__ import annotations

import pytest
import torch
import transformers  # the `test` extra

from gptlab.errors import ConfigError
from gptlab.interop.gpt_neo import convert_gpt_neo
from gptlab.model import GPT


def random_gpt_neo(seed: int, **overrides) -> transformers.GPTNeoForCausalLM:
    settings = dict(
        vocab_size=101,
        max_position_embeddings=64,
        hidden_size=32,
        num_layers=4,
        num_heads=4,
        attention_types=[[["global", "local"], 2]],
        window_size=5,
        bos_token_id=0,
        eos_token_id=0,
    )
    settings.update(overrides)
    torch.manual_seed(seed)
    model = transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(**settings)).eval()
    # GPT-Neo's N(0, 0.02) init leaves attention nearly uniform, where a wrong mask or scale hardly shows;
    # N(0, 0.1) makes every score matter while float32 rounding stays well under 1e-5.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" not in name:
                p.normal_(0.0, 0.1)
    return model


@pytest.mark.parametrize(
    "seed,overrides,batch,T",
    [
        (0, {}, 2, 40),
        (1, {"attention_types": [[["local", "global", "local"], 1]], "num_layers": 3, "window_size": 3}, 1, 17),
        (2, {"intermediate_size": 48, "num_heads": 2, "window_size": 8}, 3, 64),
    ],
)
def test_logits_match_transformers(seed: int, overrides: dict, batch: int, T: int) -> None:
    hf = random_gpt_neo(seed, **overrides)
    cfg, state = convert_gpt_neo(hf.config.to_dict(), hf.state_dict())
    model = GPT(cfg).eval()
    model.load_state_dict(state, strict=True)
    idx = torch.randint(0, cfg.vocab_size, (batch, T), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = hf(idx).logits
        got = model(idx)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_config_carries_the_pattern_and_unscaled_scores() -> None:
    hf = random_gpt_neo(0)
    cfg, _ = convert_gpt_neo(hf.config.to_dict(), hf.state_dict())
    assert cfg.attn_pattern == ["dense", "local"] and cfg.attn_window == 5
    assert cfg.attn_scale == 1.0 and cfg.qkv_bias is False and cfg.attn_bias is True


def test_wrong_pattern_would_not_match() -> None:
    """The comparison above is sensitive to the local band: all-dense layers give other logits."""
    hf = random_gpt_neo(0)
    cfg, state = convert_gpt_neo(hf.config.to_dict(), hf.state_dict())
    cfg.attn_pattern = ["dense"]
    model = GPT(cfg).eval()
    model.load_state_dict(state, strict=True)
    idx = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(idx) - hf(idx).logits).abs().max() > 1e-2


def test_unknown_weights_are_refused() -> None:
    hf = random_gpt_neo(0)
    state = dict(hf.state_dict(), **{"transformer.h.0.attn.attention.rotary.weight": torch.zeros(1)})
    with pytest.raises(ConfigError, match="rotary"):
        convert_gpt_neo(hf.config.to_dict(), state)
