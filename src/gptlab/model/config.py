"""GPTConfig: every architecture toggle of docs/model.md as one flat dataclass.

The fields are flat so a Hydra override stays short (`model.norm=post`), and `conf/model/*.yaml`
holds exactly these fields, so `GPTConfig(**cfg.model)` builds it directly. It is also the model group's
schema (gptlab.config registers it with Hydra): each field's type, default and help are declared here once.
How the model runs (compile, activation checkpointing) is the trainer's `runtime`, not part of this config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

from gptlab.errors import ConfigError, invalid_choice, is_int, is_number, require_int
from gptlab.model.activations import ACTIVATIONS
from gptlab.model.norms import NORMS
from gptlab.model.parametrization import PARAMETRIZATIONS
from gptlab.model.positions import POSITIONS
from gptlab.model.residual import PLACEMENTS
from gptlab.model.sparse_attention import ATTENTION_KINDS

# Each choice-valued field is a key of the table that builds it (docs/architecture.md, "Components are found by
# name"); attn_impl names a kernel of sparse_attention.attend, the one attention dispatcher.
ATTN_IMPLS = ("auto", "sdpa", "chunked", "flex", "flash")


# Fields GPTConfig had until runtime choices moved to the trainer's side (the run config's `runtime` node).
RUNTIME_FIELDS_BEFORE = ("compile", "activation_checkpointing")


def _f(default: Any, help: str) -> Any:
    """A field with its user documentation, written once: gptlab.config's reference page and the comments of
    conf/model/base.yaml are checked against it."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class GPTConfig:
    """Symbols follow [S0]: d=vocab_size, T=block_size, D=n_embd, H=n_head, M=n_layer."""

    vocab_size: Optional[int] = _f(None, "d; null = take it from the tokenizer")
    block_size: int = _f(256, "T, context length")
    n_layer: int = _f(4, "M, number of blocks")
    n_head: int = _f(4, "H, attention heads")
    n_embd: int = _f(128, "D, residual width")
    head_dim: Optional[int] = _f(None, "D_K per head; null = n_embd // n_head")
    v_head_dim: Optional[int] = _f(None, "D_V per head; null = head_dim")
    d_ff: Optional[int] = _f(
        None,
        "MLP hidden width; null = 4 * n_embd, or for swiglu/geglu 8/3 * n_embd rounded to a multiple of 64 (same "
        "parameters as the 4 * n_embd ungated MLP: 3 matrices instead of 2)"
    )
    mlp_layers: int = _f(2, "L, linear layers in the MLP (2 in GPT-2/3)")
    norm: str = _f("pre", "pre (GPT-2/3, eq. 9) | post (GPT-1, original Transformer)")
    final_norm: Optional[bool] = _f(None, "null = true for pre-LN (eq. 10), false for post-LN")
    pos_emb: str = _f(
        "learned", "learned (eq. 2) | sinusoidal | none | rope (rotary, RoFormer) | alibi (linear biases)"
    )
    tie_weights: bool = _f(True, "head shares the token embedding (W_head = E_1^T)")
    activation: str = _f(
        "gelu_tanh", "gelu_tanh (eq. 8) | gelu (exact) | relu | swiglu | geglu (gated: silu/gelu(x W) * x V)"
    )
    attn_bias: bool = _f(True, "biases in the Q/K/V and output projections")
    qkv_bias: Optional[bool] = _f(
        None, "biases on Q/K/V alone; null = attn_bias (GPT-Neo: false, bias on the output only)"
    )
    mlp_bias: bool = _f(True, "biases in the MLP layers")
    dropout: float = _f(0.0, "embeddings, attention probabilities, residual branches")
    layer_norm_eps: float = _f(1e-5, "epsilon of every norm (LayerNorm or RMSNorm)")
    # Sparse attention ([S3], GPT-3): layer i uses attn_pattern[i % len(attn_pattern)].
    attn_pattern: list[str] = _f(
        ["dense"], "kinds cycled over layers: dense | local | strided, e.g. [dense, local] as GPT-3"
    )
    attn_window: int = _f(256, "w: local sees keys i-w < j <= i, strided sees j <= i with (i-j) % w == 0")
    attn_impl: str = _f("auto", "auto | sdpa (masked dense, the reference) | chunked (O(T*w), CPU+GPU) | flex (GPU) | "
                        "flash (flash-attn's window, local layers, CUDA bf16/fp16)")
    attn_scale: Optional[float] = _f(
        None, "scores times this; null = 1/sqrt(D_K) (eq. 5); GPT-Neo checkpoints use 1.0; mup: the base width's, / r"
    )
    # Post-GPT-3 toggles (GPT-2 -> LLaMA and the speedrun tricks); all off = GPT-2/3 exactly.
    norm_type: str = _f(
        "layernorm", "layernorm | rmsnorm (no mean, no bias), for every norm: pre, post, final and qk_norm"
    )
    rope_theta: float = _f(10000.0, "RoPE base (pos_emb=rope): pair i of a head turns by position * theta^(-2i/R)")
    rope_fraction: float = _f(1.0, "share of each head's dims RoPE rotates, R = fraction * head_dim (GPT-J/NeoX: 0.25)")
    qk_norm: bool = _f(False, "normalise each head's queries and keys (norm_type, learned gain) before Q K^T")
    z_loss: float = _f(0.0, "PaLM auxiliary loss: + z_loss * mean(log^2 Z) on the training loss (PaLM: 1e-4); 0 = off")
    logit_softcap: Optional[float] = _f(
        None, "cap the output logits at c * tanh(logits / c) (Gemma 2: 30); null = no cap"
    )
    pad_vocab_to: Optional[int] = _f(
        None, "round the embedding/head rows up to a multiple of this (64: 50257 → 50304); null = d (conf/: 64 on "
        "CUDA GPUs)"
    )
    parametrization: str = _f(
        "standard",
        "standard (GPT-2's N(0, 0.02), residual projections / sqrt(2M)) | mup (Tensor Programs V: hidden init / "
        "sqrt(r), hidden Adam lr / r, logits / r, scores 1/D_K; r = n_embd / mup_base_width; docs/mup.md)"
    )
    mup_base_width: int = _f(
        128, "parametrization=mup: an integer >= 1, the n_embd whose best lr wider models share (r = n_embd / "
        "this; r = 1 is standard)"
    )

    def __post_init__(self) -> None:
        self._validate()
        if self.head_dim is None:
            self.head_dim = self.n_embd // self.n_head
        if self.v_head_dim is None:
            self.v_head_dim = self.head_dim
        if self.d_ff is None:
            self.d_ff = default_d_ff(self.n_embd, self.activation)
        if self.final_norm is None:
            self.final_norm = PLACEMENTS[self.norm].final_norm
        if self.qkv_bias is None:
            self.qkv_bias = self.attn_bias
        self.attn_pattern = list(self.attn_pattern)

    def layer_kind(self, layer: int) -> str:
        """The attention kind of block `layer` (0-based): the pattern, cycled."""
        return self.attn_pattern[layer % len(self.attn_pattern)]

    def _validate(self) -> None:
        for name, table in (("norm", PLACEMENTS), ("pos_emb", POSITIONS), ("activation", ACTIVATIONS),
                            ("norm_type", NORMS), ("parametrization", PARAMETRIZATIONS)):
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in table:  # [] is unhashable
                raise invalid_choice(f"model.{name}", getattr(self, name), tuple(table))
        positive = ["block_size", "n_layer", "n_head", "n_embd", "mlp_layers", "mup_base_width"]
        optional = ("vocab_size", "head_dim", "v_head_dim", "d_ff", "pad_vocab_to")
        positive += [f for f in optional if getattr(self, f) is not None]
        for name in positive:
            value = getattr(self, name)
            require_int(f"model.{name}", value)
        if self.head_dim is None and self.n_embd % self.n_head:
            raise ConfigError(f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}; "
                              f"{heads_that_divide(self.n_embd, self.n_head)}.")
        if not is_number(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r} must be a number in [0, 1).")
        if not is_number(self.layer_norm_eps) or not self.layer_norm_eps > 0:
            raise ConfigError(f"model.layer_norm_eps={self.layer_norm_eps!r} must be a number > 0 (e.g. 1e-5).")
        self._validate_attention()
        self._validate_modern()

    def _validate_modern(self) -> None:
        for name, low, high in [("rope_theta", 0.0, None), ("rope_fraction", 0.0, 1.0)]:
            value = getattr(self, name)
            if not is_number(value) or not value > low:
                raise ConfigError(f"model.{name}={value!r} must be a number > {low}.")
            if high is not None and value > high:
                raise ConfigError(f"model.{name}={value!r} must be in (0, {high}].")
        if self.pos_emb == "rope":
            self._check_rotary_dims()
        if not isinstance(self.qk_norm, bool):
            raise ConfigError(f"model.qk_norm={self.qk_norm!r} must be true or false.")
        z = self.z_loss
        if not is_number(z) or not z >= 0:
            raise ConfigError(f"model.z_loss={z!r} must be a number >= 0 (0 = off; PaLM uses 1e-4).")
        cap = self.logit_softcap
        if cap is not None and not (is_number(cap) and cap > 0):
            raise ConfigError(f"model.logit_softcap={cap!r} must be a positive number (Gemma 2: 30), or null.")

    @property
    def qk_head_dim(self) -> int:
        """D_K: head_dim, or n_embd / n_head when it is not set."""
        return self.head_dim if self.head_dim is not None else self.n_embd // self.n_head

    @property
    def rotary_dim(self) -> int:
        """R: how many dimensions of each query/key head RoPE rotates, exactly rope_fraction * D_K (an even number:
        `_check_rotary_dims` refuses a fraction that lands between pairs)."""
        return round(self.qk_head_dim * self.rope_fraction)

    def _check_rotary_dims(self) -> None:
        """RoPE rotates pairs of dims, so rope_fraction * D_K must be an even count >= 2; anything else used to be
        rounded down in silence (0.3 of 64 rotated 18 dims, a head_dim of 7 rotated 6)."""
        D = self.qk_head_dim
        dims = D * self.rope_fraction
        if abs(dims - round(dims)) < 1e-6 and round(dims) % 2 == 0 and round(dims) >= 2:
            return
        head = f"model.head_dim={self.head_dim}" if self.head_dim is not None else \
            f"head_dim n_embd / n_head = {D}"
        below, above = int(dims) // 2 * 2, int(dims) // 2 * 2 + 2
        fractions = [f"{k / D!r} ({k} of {D} dims)" for k in (below, above) if 2 <= k <= D]
        ways = [f"model.rope_fraction={' or '.join(fractions)}"] if fractions else []
        if self.rope_fraction == 1.0:
            ways.append(f"an even model.head_dim ({D - 1 if D % 2 else D - 2} or {D + 1 if D % 2 else D + 2})")
        else:
            ways.append("another model.head_dim")
        raise ConfigError(
            f"model.rope_fraction={self.rope_fraction} of {head} is {dims:g} dimensions, but RoPE rotates whole pairs: "
            f"rope_fraction x head_dim must be an even number >= 2. Use {', or '.join(ways)}."
        )

    def _validate_attention(self) -> None:
        pattern = self.attn_pattern
        if isinstance(pattern, str) or not isinstance(pattern, Sequence):
            raise ConfigError(
                f"model.attn_pattern={pattern!r} must be a list of kinds cycled over layers, e.g. "
                "model.attn_pattern=[dense,local]."
            )
        if not pattern:
            raise ConfigError(
                "model.attn_pattern is empty; give at least one kind, e.g. model.attn_pattern=[dense], from: "
                f"{', '.join(ATTENTION_KINDS)}."
            )
        for kind in pattern:
            if kind not in ATTENTION_KINDS:
                known = [k if k in ATTENTION_KINDS else _closest_kind(k) for k in pattern]
                raise ConfigError(
                    f"model.attn_pattern={list(pattern)!r} has unknown kind {kind!r}; use kinds from: "
                    f"{', '.join(ATTENTION_KINDS)}, e.g. model.attn_pattern=[{','.join(known)}]."
                )
        window = self.attn_window
        if not is_int(window) or window < 1:
            raise ConfigError(
                f"model.attn_window={window!r} must be a positive integer (the band width w; GPT-Neo uses 256)."
            )
        if self.attn_impl not in ATTN_IMPLS:
            raise invalid_choice("model.attn_impl", self.attn_impl, ATTN_IMPLS)
        scale = self.attn_scale
        if scale is not None and not (is_number(scale) and scale > 0):
            raise ConfigError(f"model.attn_scale={scale!r} must be a positive number, or null for 1/sqrt(D_K).")

    @property
    def width_mult(self) -> float:
        """muP's r = n_embd / mup_base_width; 1 under the standard parametrization (which ignores the base)."""
        return self.n_embd / self.mup_base_width if self.parametrization == "mup" else 1.0

    @property
    def scores_scale(self) -> Optional[float]:
        """The factor on Q K^T the attention uses (None = 1/sqrt(D_K)): attn_scale, or muP's 1/D_K form of it."""
        return PARAMETRIZATIONS[self.parametrization].attn_scale(self.attn_scale, self.head_dim, self.width_mult)

    @property
    def output_mult(self) -> float:
        """The factor on the logits (muP: 1/r)."""
        return PARAMETRIZATIONS[self.parametrization].output_mult(self.width_mult)

    @property
    def gated(self) -> bool:
        return ACTIVATIONS[self.activation].gated

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding and the head: vocab_size, rounded up to a multiple of pad_vocab_to.
        Tensor cores and CPU kernels are faster on round sizes ([S0]: 50257 → 50304); the extra ids are
        never targets and generation never samples them."""
        if self.vocab_size is None:
            raise ConfigError("model.vocab_size is null; set it or let the tokenizer fill it in.")
        if self.pad_vocab_to is None:
            return self.vocab_size
        return -(-self.vocab_size // self.pad_vocab_to) * self.pad_vocab_to

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> GPTConfig:
        """Build from a plain mapping (a Hydra node or a checkpoint), rejecting unknown keys by name. Checkpoints
        written before the runtime flags left the architecture still carry them: they are dropped."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in values.items() if k not in RUNTIME_FIELDS_BEFORE}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown model field(s) {unknown}; known fields: {sorted(known)}.")
        return cls(**values)

    @classmethod
    def for_tokenizer(cls, values: dict[str, Any], tokenizer_vocab: int) -> GPTConfig:
        """A preset's fields with vocab_size taken from the tokenizer when the preset leaves it null; a preset
        whose vocab_size is smaller than the tokenizer's is refused (its embedding would miss ids)."""
        values = dict(values)
        if values.get("vocab_size") is None:
            values["vocab_size"] = tokenizer_vocab
        elif isinstance(values["vocab_size"], int) and values["vocab_size"] < tokenizer_vocab:
            raise ConfigError(
                f"the tokenizer has {tokenizer_vocab} ids but model.vocab_size={values['vocab_size']}; "
                f"set model.vocab_size={tokenizer_vocab} (or more), or model.vocab_size=null to take it from the "
                "tokenizer."
            )
        return cls.from_dict(values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def heads_that_divide(n_embd: int, n_head: int) -> str:
    """The way out of an n_head that does not divide n_embd: the nearest head counts that do, or a head_dim."""
    divisors = [h for h in range(1, n_embd + 1) if n_embd % h == 0]
    nearest = sorted(divisors, key=lambda h: (abs(h - n_head), h))[:2]
    ways = f"use model.n_head={' or '.join(str(h) for h in sorted(nearest))} (dividing {n_embd})"
    if n_embd // n_head:
        ways += f", or set model.head_dim={n_embd // n_head} (D_K; H x D_K need not equal n_embd)"
    return ways


def _closest_kind(kind: Any) -> str:
    import difflib

    return (difflib.get_close_matches(str(kind), list(ATTENTION_KINDS), n=1) or ["dense"])[0]


def default_d_ff(n_embd: int, activation: str) -> int:
    """4 D; for a gated MLP (3 matrices of D x d_ff instead of 2) the width with the same parameters,
    8 D / 3, rounded to the nearest multiple of 64 (at least 64) so matmuls stay on round sizes: D=768 -> 2048."""
    if not ACTIVATIONS[activation].gated:
        return 4 * n_embd
    return max(64, round(8 * n_embd / 3 / 64) * 64)
