"""Generation: the KV cache equals full recompute, and each decoding rule does what it says."""

from __future__ import annotations

import itertools

import pytest
import torch

from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig

CONFIGS = [
    dict(),
    dict(norm="post", tie_weights=False),
    dict(n_head=3, head_dim=16, v_head_dim=8, pos_emb="sinusoidal"),  # H·D_K ≠ D, D_V ≠ D_K
    dict(pos_emb="none", pad_vocab_to=64, attn_bias=False),
    dict(attn_pattern=["dense", "local"], attn_window=4),  # GPT-3's alternation, a band shorter than T
    dict(attn_pattern=["local", "strided"], attn_window=3, n_layer=3),  # the Sparse Transformer's factorisation
]


def model(seed: int = 0, **fields) -> GPT:
    torch.manual_seed(seed)
    base = dict(vocab_size=50, block_size=24, n_layer=2, n_head=2, n_embd=32)
    gpt = GPT(GPTConfig(**{**base, **fields})).eval()
    with torch.no_grad():  # larger weights than the init, so distributions are peaked and ties impossible
        for p in gpt.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    return gpt


def prompt(batch: int = 3, length: int = 5, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fields", CONFIGS, ids=str)
def test_incremental_logits_equal_full_recompute(fields: dict) -> None:
    gpt = model(**fields)
    x = prompt(length=20)
    with torch.no_grad():
        full = gpt(x)
        caches = gpt.new_caches(3, 20)
        # a prompt, single tokens, then a chunk of three: every query offset the attention kernel sees
        steps = [gpt(x[:, :6], caches)]
        steps += [gpt(x[:, i : i + 1], caches) for i in range(6, 17)] + [gpt(x[:, 17:], caches)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= 1e-5


def test_local_layers_cache_only_their_window() -> None:
    gpt = model(attn_pattern=["dense", "local"], attn_window=4)
    x = prompt(length=20)
    caches = gpt.new_caches(3, 20)
    with torch.no_grad():
        gpt(x[:, :9], caches)
        for i in range(9, 20):
            gpt(x[:, i : i + 1], caches)
    dense, local = caches
    assert dense.k[:, :, : dense.length].shape[2] == 20  # a dense layer may look back to position 0
    assert local.k.shape[2] == 3 and local.start == 17  # w - 1 = 3 keys: positions 17, 18, 19
    at_once = gpt.new_caches(3, 20)
    with torch.no_grad():
        gpt(x, at_once)  # the same positions in one pass: the kept keys must be the same keys
    torch.testing.assert_close(local.k, at_once[1].k, rtol=0, atol=1e-5)
    torch.testing.assert_close(local.v, at_once[1].v, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fields", CONFIGS, ids=str)
def test_greedy_is_argmax_of_full_recompute(fields: dict) -> None:
    gpt = model(**fields)
    seq = gpt.generate(prompt(), 15, temperature=0)
    assert seq.shape == (3, 20)
    assert torch.equal(seq, gpt.generate(prompt(), 15, temperature=0, use_cache=False))
    with torch.no_grad():  # each generated id is the argmax (eq. 11) of the model run on everything before it
        logits = gpt(seq[:, :-1])[:, 4:, : gpt.config.vocab_size]
    assert torch.equal(logits.argmax(-1), seq[:, 5:])


def test_context_is_cropped_to_block_size() -> None:
    gpt = model()  # block_size 24; 10 + 30 tokens slide the window
    seq = gpt.generate(prompt(length=10), 30, temperature=0)
    assert seq.shape == (3, 40)
    assert torch.equal(seq, gpt.generate(prompt(length=10), 30, temperature=0, use_cache=False))
    with torch.no_grad():
        for t in range(24, 40):  # tokens past block_size see exactly the last 24
            assert torch.equal(gpt(seq[:, t - 24 : t])[:, -1].argmax(-1), seq[:, t])


def test_sampling_is_seeded_and_cache_independent() -> None:
    gpt = model()
    runs = [gpt.generate(prompt(), 12, temperature=1.3, top_k=10, top_p=0.95, use_cache=c,
                         generator=torch.Generator().manual_seed(5)) for c in (True, False, True)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    other = gpt.generate(prompt(), 12, temperature=1.3, generator=torch.Generator().manual_seed(6))
    assert not torch.equal(runs[0], other)


def first_step_samples(gpt: GPT, n: int, **options) -> tuple[torch.Tensor, torch.Tensor]:
    x = prompt(batch=1).expand(n, -1)
    with torch.no_grad():
        probs = gpt(x[:1])[0, -1, : gpt.config.vocab_size].softmax(-1)
    return gpt.generate(x, 1, generator=torch.Generator().manual_seed(0), **options)[:, -1], probs


def test_top_k_samples_only_the_k_most_likely() -> None:
    gpt = model(seed=1, n_embd=8)  # a flatter distribution, so plain sampling would leave the top 3
    samples, probs = first_step_samples(gpt, 2000, top_k=3, temperature=2.0)
    top3 = set(probs.topk(3).indices.tolist())
    assert set(samples.tolist()) == top3
    plain, _ = first_step_samples(gpt, 2000, temperature=2.0)
    assert not set(plain.tolist()) <= top3


def test_top_p_keeps_the_smallest_nucleus() -> None:
    gpt = model(seed=1, n_embd=8)
    samples, probs = first_step_samples(gpt, 2000, top_p=0.5)
    order = probs.argsort(descending=True)
    size = int((probs[order].cumsum(0) < 0.5).sum()) + 1  # the fewest ids whose mass reaches 0.5
    assert set(samples.tolist()) == set(order[:size].tolist())
    tiny, _ = first_step_samples(gpt, 50, top_p=1e-6)  # the best id always stays
    assert set(tiny.tolist()) == {int(order[0])}


def test_temperature_sampling_follows_softmax() -> None:
    gpt = model(seed=1, n_embd=8)
    samples, probs = first_step_samples(gpt, 20000, temperature=1.0)
    freq = torch.bincount(samples, minlength=probs.numel()).float() / samples.numel()
    assert (freq - probs).abs().max().item() < 0.02


def test_eos_stops_rows_and_pads_them() -> None:
    gpt = model()
    free = gpt.generate(prompt(), 15, temperature=0)
    eos = int(free[0, 7])  # row 0 emits it within 3 new tokens
    seq = gpt.generate(prompt(), 15, temperature=0, eos_token_id=eos)
    for row in range(3):
        hits = (free[row, 5:] == eos).nonzero()
        stop = 5 + int(hits[0]) if len(hits) else None
        if stop is None:
            assert torch.equal(seq[row], free[row, : seq.shape[1]])
        else:
            assert torch.equal(seq[row, : stop + 1], free[row, : stop + 1]) and (seq[row, stop:] == eos).all()
    first = 5 + int((free[0, 5:] == eos).nonzero()[0])
    one_row = gpt.generate(prompt()[:1], 15, temperature=0, eos_token_id=eos)
    assert one_row.shape == (1, first + 1)  # generation ends once every row has finished


def sequence_logprob(gpt: GPT, seq: torch.Tensor, start: int) -> torch.Tensor:
    with torch.no_grad():
        logp = gpt(seq[:, :-1]).log_softmax(-1)
    return logp[:, start - 1 :].gather(-1, seq[:, start:, None]).sum(dim=(1, 2))


def test_wide_beam_search_finds_the_most_likely_continuation() -> None:
    gpt = model(vocab_size=6)
    x = prompt(batch=2, length=4, vocab=6)
    best = gpt.generate(x, 3, num_beams=36)  # 36 = 6^2 beams make beam search exhaustive over 3 tokens
    every = torch.tensor(list(itertools.product(range(6), repeat=3)))
    for row in range(2):
        candidates = torch.cat([x[row].expand(len(every), -1), every], dim=1)
        scores = sequence_logprob(gpt, candidates, 4)
        assert torch.equal(best[row], candidates[scores.argmax()])
    greedy = gpt.generate(x, 3, temperature=0)
    assert (sequence_logprob(gpt, best, 4) >= sequence_logprob(gpt, greedy, 4) - 1e-6).all()
    assert torch.equal(gpt.generate(x, 3, num_beams=36, use_cache=False), best)


def test_beam_search_with_eos_keeps_finished_beams() -> None:
    gpt = model()
    free = gpt.generate(prompt(), 10, num_beams=3)
    eos = int(free[1, 6])
    seq = gpt.generate(prompt(), 10, num_beams=3, eos_token_id=eos)
    hits = (seq[1, 5:] == eos).nonzero()
    assert len(hits) and (seq[1, 5 + int(hits[0]) :] == eos).all()


@pytest.mark.parametrize("options,field", [
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": 0}, "top_k"),
    ({"num_beams": 0}, "num_beams"),
    ({"num_beams": 2, "top_k": 5}, "top_k"),
])
def test_bad_options_name_the_field(options: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        model().generate(prompt(), 3, **options)
