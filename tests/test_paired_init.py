"""Paired seeds: under one seed, two variants start from the same weights wherever they have the same tensor
(model.paired_init), and paired_seeds=false gives each variant a seed of its own (apps.seeds)."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from gptlab.apps.seeds import run_seed
from gptlab.model import GPT, GPTConfig

NANO = {"vocab_size": 64, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}


def weights(init_seed: int | None, **model) -> dict[str, torch.Tensor]:
    return dict(GPT(GPTConfig(**{**NANO, **model}), init_seed=init_seed).state_dict())


def test_variants_share_the_weights_of_the_tensors_they_share() -> None:
    learned, rope = weights(1, pos_emb="learned"), weights(1, pos_emb="rope")
    assert "pos_emb.weight" in learned and "pos_emb.weight" not in rope  # the premise: one tensor more
    shared = set(learned) & set(rope)
    assert all(torch.equal(learned[k], rope[k]) for k in shared)
    untied = weights(1, tie_weights=False)
    tied = weights(1, tie_weights=True)
    assert torch.equal(tied["tok_emb.weight"], untied["tok_emb.weight"])  # the tied head is the embedding's draw
    assert not torch.equal(learned["blocks.0.attn.qkv.weight"], weights(2)["blocks.0.attn.qkv.weight"])
    torch.manual_seed(0)
    first = weights(None, pos_emb="learned")
    torch.manual_seed(0)
    second = weights(None, pos_emb="rope")  # one global stream: the learned table shifts every draw after it
    assert not torch.equal(first["blocks.0.attn.qkv.weight"], second["blocks.0.attn.qkv.weight"])


def test_unpaired_seeds_differ_per_variant_and_paired_ones_do_not() -> None:
    def cfg(pos: str, paired: bool, steps: int = 100):
        return OmegaConf.create({"seed": 3, "paired_seeds": paired, "model": {"pos_emb": pos},
                                 "optimizer": {"lr": 1e-3}, "scheduler": None, "data": {"seed": 3, "batch_size": 4},
                                 "trainer": {"max_steps": steps}})

    assert run_seed(cfg("learned", True)) == run_seed(cfg("rope", True)) == 3
    assert run_seed(cfg("learned", False)) != run_seed(cfg("rope", False))
    assert run_seed(cfg("learned", False)) == run_seed(cfg("learned", False, steps=200))  # a resume keeps its seed
