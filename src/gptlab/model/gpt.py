"""GPT: token (+ position) embedding, M blocks, optional final norm, and the head (docs/model.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import torch
from torch import nn

from gptlab.errors import ConfigError
from gptlab.model.block import Block
from gptlab.model.config import GPTConfig
from gptlab.model.documents import Documents
from gptlab.model.generation import SamplingOptions, generate
from gptlab.model.kv_cache import KVCache
from gptlab.model.norms import make_norm
from gptlab.model.paired_init import global_stream, tensor_generators
from gptlab.model.parametrization import PARAMETRIZATIONS, record_init
from gptlab.model.positions import POSITIONS
from gptlab.model.skips import Shortcuts
from gptlab.model.smear import BigramEmbedding, Smear
from gptlab.model.sparse_attention import ATTENTION_KINDS

# Modules of the speedrun's choices whose own reset_parameters sets their start after the parametrization's init.
OWN_INIT = ("gptlab.model.block", "gptlab.model.skips", "gptlab.model.smear", "gptlab.model.value_embeddings")


class GPT(nn.Module):
    """A plain nn.Module: `GPT(cfg)(idx)` maps token ids (B, T) to logits (B, T, padded_vocab_size)."""

    def __init__(self, cfg: GPTConfig, init_seed: Optional[int] = None) -> None:
        super().__init__()
        if cfg.vocab_size is None:
            raise ConfigError("model.vocab_size is null; set it or let the tokenizer fill it in before building GPT.")
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.padded_vocab_size, cfg.n_embd)  # E_1
        absolute = POSITIONS[cfg.pos_emb].absolute  # E_2 (eq. 2), the fixed sinusoids, or none
        self.pos_emb = absolute(cfg) if absolute is not None else None
        self.drop = nn.Dropout(cfg.dropout)
        self.smear = Smear(cfg.n_embd) if cfg.smear else None  # the speedrun's embedding side (smear.py)
        self.bigram = BigramEmbedding(cfg.bigram_vocab, cfg.n_embd) if cfg.bigram_vocab else None
        has_shortcuts = cfg.x0_mix or cfg.skips
        self.shortcuts = Shortcuts(cfg.n_layer, cfg.x0_mix, cfg.skips) if has_shortcuts else None  # skips.py
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.final_norm = make_norm(cfg.norm_type, cfg.n_embd, cfg.layer_norm_eps) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(cfg.n_embd, cfg.padded_vocab_size, bias=False)  # W_head
        self.reset_parameters(init_seed)
        if cfg.tie_weights:  # W_head = E_1^T: one tensor, no extra parameters ([S3])
            self.head.weight = self.tok_emb.weight
        if cfg.untie_at is not None:  # whether the head was untied in training travels with the weights
            self.register_buffer("head_untied", torch.zeros((), dtype=torch.bool))
            self.register_load_state_dict_pre_hook(_untie_to_load)

    @property
    def head_tied(self) -> bool:
        """Whether the head is the token embedding now: model.tie_weights, until model.untie_at unties it."""
        return self.head.weight is self.tok_emb.weight

    def untie_head(self) -> nn.Parameter:
        """model.untie_at (modded-nanogpt record 53, 2025-12-22): the token embedding becomes a parameter of its own,
        starting from the tied weight, which the head keeps (with its optimizer state, as the record's head keeps its
        own); returns the new embedding. gptlab.train.stages calls it at the untie step, with the optimizer."""
        self.tok_emb.weight = nn.Parameter(self.head.weight.detach().clone())
        self.head_untied.fill_(True)
        return self.tok_emb.weight

    def use_window(self, window: int) -> None:
        """Every local layer's band w (half on a short one) set to `window`: a stage of training's
        (gptlab.train.stages), or model.attn_window again for evaluation. Strided layers keep their stride."""
        for layer, block in enumerate(self.blocks):
            if block.attn is not None and block.attn.kind == "local":
                block.attn.window = self.config.layer_window(layer, window)

    def reset_parameters(self, init_seed: Optional[int] = None) -> None:
        """Every weight's starting value, as model.parametrization says (parametrization.py); with `init_seed`, each
        tensor from its own stream keyed by its name (paired_init.py), else from torch's global RNG."""
        cfg = self.config
        streams = tensor_generators(init_seed) if init_seed is not None else global_stream
        PARAMETRIZATIONS[cfg.parametrization].init(self, cfg.n_layer, cfg.width_mult, streams)
        record_init(self, cfg.zero_init_proj, cfg.init_scale, streams)
        for module in self.modules():  # the speedrun's parts start as their records say (zeros, gates at 1, ...)
            if module is not self and hasattr(module, "reset_parameters") and module.__module__ in OWN_INIT:
                module.reset_parameters()

    def embed(self, idx: torch.Tensor, start_pos: int = 0, positions: Optional[torch.Tensor] = None,
              before: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Enc+(X) = X E_1 + P E_2 (or the fixed table, or nothing), for positions start_pos.., or for the (B, T)
        `positions` given (document masking counts them from each document's start); then the smear and the
        bigram embedding when on, which read `before` (B, 1), the token before idx[:, 0] in cached decoding."""
        T = idx.shape[1]
        if start_pos + T > self.config.block_size:
            raise ValueError(
                f"sequence of length {start_pos + T} exceeds model.block_size={self.config.block_size}; "
                "crop the context or train with a larger block_size."
            )
        x = self._enc(idx, start_pos, positions)
        if self.smear is not None:
            x = self.smear(x, None if before is None else self._enc(before, start_pos - 1, None))
        if self.bigram is not None:
            x = x + self.bigram(idx, before)
        return self.drop(x)

    def _enc(self, idx: torch.Tensor, start_pos: int, positions: Optional[torch.Tensor]) -> torch.Tensor:
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + (self.pos_emb(start_pos, idx.shape[1]) if positions is None else self.pos_emb.at(positions))
        return x

    def forward(
        self, idx: torch.Tensor, caches: Optional[list[KVCache]] = None, last_only: bool = False,
        doc_ids: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Logits for idx; with `caches` (from `new_caches`), idx continues the positions cached so far.
        last_only computes the head for the last position alone: all that decoding needs, and the head
        (D x d) is the largest matmul of a small model. `doc_ids` (B, T), nondecreasing along T, turns on document
        masking (model/documents.py): each token attends and counts its position within its own document."""
        if doc_ids is not None and caches:
            raise ValueError("document masking (doc_ids) is for training and evaluation windows, not KV-cache decoding")
        documents = Documents(doc_ids) if doc_ids is not None else None
        positions = documents.positions if documents is not None else None
        x = self.embed(idx, start_pos=caches[0].length if caches else 0, positions=positions,
                       before=caches[0].last_token if caches else None)
        if caches:
            caches[0].last_token = idx[:, -1:]
        x0, outputs, shortcuts = x, {}, self.shortcuts
        for i, block in enumerate(self.blocks):  # how each block runs (checkpointed, sharded, compiled) is
            if shortcuts is not None:  # applied from outside: execution/parallelize.py
                x = shortcuts.into(i, x, x0, outputs)
            x = block(x, caches[i] if caches else None, documents, idx)
            if shortcuts is not None and i in shortcuts.sources:
                outputs[i] = x
        if last_only:
            x = x[:, -1:]
        logits = self.head(self.final_norm(x))
        if self.config.output_mult != 1.0:  # muP's 1/r on the readout (parametrization.py)
            logits = logits * self.config.output_mult
        if self.config.logit_softcap is not None:  # Gemma 2: c * tanh(logits / c), bounded in (-c, c)
            logits = self.config.logit_softcap * torch.tanh(logits / self.config.logit_softcap)
        if self.config.logit_sigmoid_cap is not None:  # the speedrun's A sigmoid((z + B) / C), in (0, A): record #54
            A, B, C = self.config.logit_sigmoid_cap
            logits = A * torch.sigmoid((logits + B) / C)
        return logits

    def new_caches(self, batch: int, max_len: int) -> list[KVCache]:
        """One empty KV cache per block, for up to max_len positions; local layers keep only their window."""
        p, c = self.tok_emb.weight, self.config
        return [
            KVCache(batch, c.n_head, max_len, c.head_dim, c.v_head_dim, p.dtype, p.device,
                    window=block.attn.window if block.attn is not None and ATTENTION_KINDS[block.attn.kind].cache_window
                    else None)
            for block in self.blocks
        ]

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        num_beams: int = 1,
        eos_token_id: Optional[int] = None,
        use_cache: bool = True,
        generator: Optional[torch.Generator] = None,
    ) -> torch.Tensor:
        """Continue each row of idx (B, T) by up to max_new_tokens ids; see gptlab.model.generation."""
        options = SamplingOptions(temperature, top_k, top_p, num_beams, eos_token_id, use_cache)
        return generate(self, idx, max_new_tokens, options, generator)

    def load_state_checked(self, state: dict[str, torch.Tensor], source: Union[str, Path], way_out: str) -> None:
        """load_state_dict(strict=True), but a mismatch names every missing, unexpected and mis-shaped key,
        where the weights came from, and `way_out` (what the caller's user can pass instead)."""
        expected = self.state_dict()
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        shapes = [
            f"{key}: {tuple(state[key].shape)} in {source}, {tuple(expected[key].shape)} in the model"
            for key in sorted(set(expected) & set(state))
            if state[key].shape != expected[key].shape
        ]
        problems = [f"missing keys: {missing}"] * bool(missing) + [f"unexpected keys: {unexpected}"] * bool(unexpected)
        problems += [f"shape mismatches: {'; '.join(shapes)}"] * bool(shapes)
        if problems:
            raise ConfigError(f"{source} does not fit the model ({self.config.n_layer} layers, "
                              f"n_embd={self.config.n_embd}): " + " | ".join(problems) + f". {way_out}")
        self.load_state_dict(state, strict=True)

    def num_parameters(self) -> int:
        """Unique parameters: a tied head is counted once."""
        return sum(p.numel() for p in self.parameters())


def _untie_to_load(model: GPT, state: dict, prefix: str, *_: object) -> None:
    """A state saved after model.untie_at untied the head loads into a model built tied: untie it first, so the two
    weights land in two tensors (Lightning's resume, eval.py and gptlab.load all load through here)."""
    untied = state.get(prefix + "head_untied")
    if untied is not None and bool(untied) and model.head_tied:
        model.untie_head()
