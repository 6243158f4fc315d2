"""pos_emb=sinusoidal against Vaswani et al. 2017: embeddings times sqrt(D) (§3.4) plus the fixed table (§3.5), which
gptlab writes as E_1 + PE / sqrt(D); sinusoidal_scale=1.0 keeps the table added as is."""

from __future__ import annotations

import math

import pytest
import torch

from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig

SMALL = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=16, pos_emb="sinusoidal")


def _paper_table(T: int, D: int) -> torch.Tensor:
    """§3.5 written out entry by entry: PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D))."""
    pe = torch.zeros(T, D, dtype=torch.float64)
    for p in range(T):
        for i in range(0, D, 2):
            pe[p, i] = math.sin(p / 10000 ** (i / D))
            if i + 1 < D:
                pe[p, i + 1] = math.cos(p / 10000 ** (i / D))
    return pe


def _position_part(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """What embed adds to the token embeddings X E_1."""
    with torch.no_grad():
        return (model.embed(idx) - model.tok_emb(idx)).double()


def test_default_is_the_papers_sum_scaled_by_one_over_sqrt_d() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL)).eval()
    D, idx = 16, torch.randint(0, 37, (2, 16))
    with torch.no_grad():
        ours = model.embed(idx).double()
        paper = model.tok_emb(idx).double() * math.sqrt(D) + _paper_table(16, D)  # E_1 sqrt(D) + PE
    torch.testing.assert_close(ours * math.sqrt(D), paper, rtol=0, atol=1e-5)
    assert _position_part(model, idx).abs().max() <= 1 / math.sqrt(D) + 1e-6  # the table no longer reaches 1


def test_scale_one_adds_the_table_as_is() -> None:
    model = GPT(GPTConfig(**SMALL, sinusoidal_scale=1.0)).eval()
    idx = torch.randint(0, 37, (2, 16))
    torch.testing.assert_close(_position_part(model, idx)[0], _paper_table(16, 16), rtol=0, atol=1e-6)


def test_the_scale_moves_the_table_and_no_weight() -> None:
    """The head shares E_1 (tie_weights): scaling the table, not E_1, leaves every weight, the head's too, as is."""
    torch.manual_seed(0)
    new = GPT(GPTConfig(**SMALL))
    torch.manual_seed(0)
    old = GPT(GPTConfig(**SMALL, sinusoidal_scale=1.0))
    assert new.head.weight is new.tok_emb.weight
    for key, value in new.state_dict().items():
        assert torch.equal(value, old.state_dict()[key]), key
    torch.testing.assert_close(new.pos_emb.table * 4.0, old.pos_emb.table)  # 1/sqrt(16)


def test_document_positions_and_the_kv_cache_read_the_scaled_table() -> None:
    """Positions restarted per document, and positions continued from a cache, come from the same scaled table."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL)).eval()
    idx = torch.randint(0, 37, (1, 8))
    doc_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        second_doc = model(idx, doc_ids=doc_ids)[:, 3:]
        alone = model(idx[:, 3:])
        caches = model.new_caches(1, 16)
        model(idx[:, :3], caches)
        continued = model(idx[:, 3:], caches)
        whole = model(idx)
    torch.testing.assert_close(second_doc, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(continued, whole[:, 3:], rtol=0, atol=1e-5)


def test_mup_takes_the_base_width() -> None:
    """muP keeps each embedding coordinate the same size as the model widens: the factor is the base width's."""
    wide = GPTConfig(**{**SMALL, "n_embd": 64}, parametrization="mup", mup_base_width=16)
    assert wide.sinusoidal_mult == pytest.approx(1 / 4)
    assert GPTConfig(**SMALL, parametrization="mup", mup_base_width=16).sinusoidal_mult == \
        GPTConfig(**SMALL).sinusoidal_mult  # r = 1 is standard


def test_a_saved_config_from_before_the_key_rebuilds_the_table_as_trained() -> None:
    saved = GPTConfig(**SMALL, sinusoidal_scale=1.0).to_dict()
    del saved["sinusoidal_scale"]  # as written before the key existed
    assert GPTConfig.from_dict(saved).sinusoidal_mult == 1.0
    assert GPTConfig.from_dict(GPTConfig(**SMALL).to_dict()).sinusoidal_mult == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [0, -1.0, "big"])
def test_a_bad_scale_names_the_field_and_null(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"model\.sinusoidal_scale=.* null for 1/sqrt\(D\)"):
        GPTConfig(**SMALL, sinusoidal_scale=bad)
