"""GPTConfig: every architecture toggle of DESIGN §1 as one flat dataclass.

The fields are flat so a Hydra override stays short (`model.norm=post`), and `conf/model/*.yaml`
holds exactly these fields, so `GPTConfig(**cfg.model)` builds it directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

from gptlab.errors import ConfigError, invalid_choice

NORMS = ("pre", "post")
POS_EMBS = ("learned", "sinusoidal", "none")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu")


@dataclass
class GPTConfig:
    """Symbols follow seed 000: d=vocab_size, T=block_size, D=n_embd, H=n_head, M=n_layer."""

    vocab_size: Optional[int] = None  # d; None = take it from the tokenizer
    block_size: int = 256  # T, the longest context
    n_layer: int = 4  # M
    n_head: int = 4  # H
    n_embd: int = 128  # D
    head_dim: Optional[int] = None  # D_K; None = n_embd // n_head
    v_head_dim: Optional[int] = None  # D_V; None = head_dim
    d_ff: Optional[int] = None  # hidden width of the MLP; None = 4 * n_embd
    mlp_layers: int = 2  # L, linear layers in the MLP
    norm: str = "pre"  # pre (GPT-2/3, eq. 9) | post (GPT-1, original Transformer)
    final_norm: Optional[bool] = None  # None = True for pre-LN (eq. 10), False for post-LN
    pos_emb: str = "learned"  # learned (eq. 2) | sinusoidal | none
    tie_weights: bool = True  # W_head = E_1^T
    activation: str = "gelu_tanh"  # gelu_tanh (eq. 8) | gelu (exact) | relu
    attn_bias: bool = True  # biases of the Q/K/V and output projections
    mlp_bias: bool = True  # biases b_i of the MLP layers
    dropout: float = 0.0  # on embeddings, attention probabilities and residual branches
    layer_norm_eps: float = 1e-5
    pad_vocab_to: Optional[int] = None  # round the embedding/head rows up to a multiple of this (64: 50257 → 50304)

    def __post_init__(self) -> None:
        self._validate()
        if self.head_dim is None:
            self.head_dim = self.n_embd // self.n_head
        if self.v_head_dim is None:
            self.v_head_dim = self.head_dim
        if self.d_ff is None:
            self.d_ff = 4 * self.n_embd
        if self.final_norm is None:
            self.final_norm = self.norm == "pre"

    def _validate(self) -> None:
        if self.norm not in NORMS:
            raise invalid_choice("model.norm", self.norm, NORMS)
        if self.pos_emb not in POS_EMBS:
            raise invalid_choice("model.pos_emb", self.pos_emb, POS_EMBS)
        if self.activation not in ACTIVATIONS:
            raise invalid_choice("model.activation", self.activation, ACTIVATIONS)
        positive = ["block_size", "n_layer", "n_head", "n_embd", "mlp_layers"]
        optional = ("vocab_size", "head_dim", "v_head_dim", "d_ff", "pad_vocab_to")
        positive += [f for f in optional if getattr(self, f) is not None]
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model.{name}={value!r} must be a positive integer.")
        if self.head_dim is None and self.n_embd % self.n_head:
            raise ConfigError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}; "
                "pick n_head dividing n_embd, or set model.head_dim (and model.v_head_dim) explicitly."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r} must be in [0, 1).")
        if not self.layer_norm_eps > 0:
            raise ConfigError(f"model.layer_norm_eps={self.layer_norm_eps!r} must be > 0.")

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding and the head: vocab_size, rounded up to a multiple of pad_vocab_to.
        Tensor cores and CPU kernels are faster on round sizes (seed 000: 50257 → 50304); the extra ids are
        never targets and generation never samples them."""
        if self.vocab_size is None:
            raise ConfigError("model.vocab_size is null; set it or let the tokenizer fill it in.")
        if self.pad_vocab_to is None:
            return self.vocab_size
        return -(-self.vocab_size // self.pad_vocab_to) * self.pad_vocab_to

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "GPTConfig":
        """Build from a plain mapping (a Hydra node or a checkpoint), rejecting unknown keys by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown model field(s) {unknown}; known fields: {sorted(known)}.")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
