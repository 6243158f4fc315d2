"""GPTConfig: every architecture toggle of docs/model.md as one flat dataclass.

The fields are flat so a Hydra override stays short (`model.norm=post`), and `conf/model/*.yaml`
holds exactly these fields, so `GPTConfig(**cfg.model)` builds it directly. It is also the model group's
schema (gptlab.config registers it with Hydra): each field's type, default and help are declared here once.
How the model runs (compile, activation checkpointing) is the trainer's `runtime`, not part of this config.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Optional

from gptlab.errors import ConfigError, invalid_choice, is_int, is_number
from gptlab.fields import Check, boolean, check_declared, must, setting
from gptlab.model.activations import ACTIVATIONS
from gptlab.model.norms import NORMS
from gptlab.model.parametrization import PARAMETRIZATIONS
from gptlab.model.positions import POSITIONS
from gptlab.model.residual import PLACEMENTS
from gptlab.model.sparse_attention import ATTENTION_KINDS
from gptlab.model.speedrun_checks import RULES as SPEEDRUN_RULES
from gptlab.model.speedrun_checks import layer_list, projections, sigmoid_cap, skip_pairs, weights

# Each choice-valued field is a key of the table that builds it (docs/architecture.md, "Components are found by
# name"); attn_impl names a kernel of sparse_attention.attend, the one attention dispatcher.
ATTN_IMPLS = ("auto", "sdpa", "chunked", "flex", "flash")


# Fields GPTConfig had until runtime choices moved to the trainer's side (the run config's `runtime` node).
RUNTIME_FIELDS_BEFORE = ("compile", "activation_checkpointing")

# Fields added later, with the value that rebuilds the model a checkpoint written before them was trained as: a
# saved config lacks only these (Hydra's schema gives every node every field).
ADDED_FIELDS_BEFORE = {"sinusoidal_scale": 1.0}


# Each field's check, declared beside it with `setting` as every config schema does (gptlab.fields); the words are
# GPTConfig's own: `model.<field>=<value> must be ...`.
def one_of(table: Any) -> Check:
    """A name that is a key of the table that builds it."""
    def check(field: str, value: Any) -> None:
        if not isinstance(value, str) or value not in table:  # a list is unhashable: refused as a wrong choice
            raise invalid_choice(field, value, tuple(table))

    return check


# A layer kind of attn_pattern beside ATTENTION_KINDS': a local layer whose band is half the window (modded-nanogpt
# record 20, 2025-01-16: long/short sliding windows, short = long // 2), resolved by GPTConfig.layer_kind/layer_window.
SHORT = "short"
LAYER_KINDS = (*ATTENTION_KINDS, SHORT)


def attention_pattern(field: str, pattern: Any) -> None:
    """The examples are written as typed on a command line: `[dense,local]` without a space, which a shell splits."""
    if isinstance(pattern, str) or not isinstance(pattern, Sequence):
        raise ConfigError(f"{field}={pattern!r} must be a list of kinds cycled over layers, e.g. "
                          f"{field}=[dense,local].")
    if not pattern:
        raise ConfigError(f"{field} is empty; give at least one kind, e.g. {field}=[dense], from: "
                          f"{', '.join(LAYER_KINDS)}.")
    for kind in pattern:
        if kind not in LAYER_KINDS:
            known = [k if k in LAYER_KINDS else _closest_kind(k) for k in pattern]
            raise ConfigError(f"{field}={list(pattern)!r} has unknown kind {kind!r}; use kinds from: "
                              f"{', '.join(LAYER_KINDS)}, e.g. {field}=[{','.join(known)}].")


def _closest_kind(kind: Any) -> str:
    return (difflib.get_close_matches(str(kind), list(LAYER_KINDS), n=1) or ["dense"])[0]


def rope_fraction(field: str, value: Any) -> None:
    if not is_number(value) or not value > 0.0:
        raise ConfigError(f"{field}={value!r} must be a number > 0.0.")
    if value > 1.0:
        raise ConfigError(f"{field}={value!r} must be in (0, 1.0].")


POSITIVE = must(lambda v: is_int(v) and v >= 1, "a positive integer")
OPTIONAL_POSITIVE = must(lambda v: v is None or (is_int(v) and v >= 1), "a positive integer")
BOOLEAN = boolean


def optional_boolean(field: str, value: Any) -> None:
    if value is not None:
        boolean(field, value)


DROPOUT = must(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)", number=True)
POSITIVE_EPS = must(lambda v: v > 0, "a number > 0 (e.g. 1e-5)", number=True)
WINDOW = must(lambda v: is_int(v) and v >= 1, "a positive integer (the band width w; GPT-Neo uses 256)")
SCALE = must(lambda v: v is None or (is_number(v) and v > 0), "a positive number, or null for 1/sqrt(D_K)")
TABLE_SCALE = must(lambda v: v is None or (is_number(v) and v > 0), "a positive number, or null for 1/sqrt(D)")
THETA = must(lambda v: is_number(v) and v > 0.0, "a number > 0.0")
Z_LOSS = must(lambda v: is_number(v) and v >= 0, "a number >= 0 (0 = off; PaLM uses 1e-4)")
SCALE_OR_NULL = must(lambda v: v is None or (is_number(v) and v > 0), "a positive number (the record: 0.5), or null")
BIGRAM_ROWS = must(lambda v: is_int(v) and (v == 0 or v >= 2), "0 (off) or an integer >= 2 (the record: 377280)")
SOFTCAP = must(lambda v: v is None or (is_number(v) and v > 0), "a positive number (Gemma 2: 30), or null")
UNTIE_AT = must(lambda v: v is None or (is_number(v) and 0 < v < 1),
                "a fraction in (0, 1) of trainer.max_steps (record 53: 0.67), or null for a head tied throughout")


@dataclass
class GPTConfig:
    """Symbols follow [S0]: d=vocab_size, T=block_size, D=n_embd, H=n_head, M=n_layer."""

    vocab_size: Optional[int] = setting(None, "d; null = take it from the tokenizer", OPTIONAL_POSITIVE)
    block_size: int = setting(256, "T, context length", POSITIVE)
    n_layer: int = setting(4, "M, number of blocks", POSITIVE)
    n_head: int = setting(4, "H, attention heads", POSITIVE)
    n_embd: int = setting(128, "D, residual width", POSITIVE)
    head_dim: Optional[int] = setting(None, "D_K per head; null = n_embd // n_head", OPTIONAL_POSITIVE)
    v_head_dim: Optional[int] = setting(None, "D_V per head; null = head_dim", OPTIONAL_POSITIVE)
    d_ff: Optional[int] = setting(
        None,
        "MLP hidden width; null = 4 * n_embd, or for swiglu/geglu 8/3 * n_embd rounded to a multiple of 64 (same "
        "parameters as the 4 * n_embd ungated MLP: 3 matrices instead of 2)", OPTIONAL_POSITIVE)
    mlp_layers: int = setting(2, "L, linear layers in the MLP (2 in GPT-2/3)", POSITIVE)
    norm: str = setting("pre", "pre (GPT-2/3, eq. 9) | post (GPT-1, original Transformer)", one_of(PLACEMENTS))
    final_norm: Optional[bool] = setting(None, "null = true for pre-LN (eq. 10), false for post-LN", optional_boolean)
    pos_emb: str = setting(
        "learned", "learned (eq. 2) | sinusoidal | none | rope (rotary, RoFormer) | alibi (linear biases)",
        one_of(POSITIONS))
    sinusoidal_scale: Optional[float] = setting(
        None, "factor on the sinusoidal table (pos_emb=sinusoidal); null = 1/sqrt(D), Vaswani et al.'s sqrt(D) on "
        "the embeddings moved onto the table (mup: the base width's D); 1.0 = the table added as is (earlier gptlab)",
        TABLE_SCALE)
    tie_weights: bool = setting(True, "head shares the token embedding (W_head = E_1^T)", BOOLEAN)
    activation: str = setting(
        "gelu_tanh", "gelu_tanh (eq. 8) | gelu (exact) | relu | relu2 (relu(x)^2: the speedrun, record #5) | swiglu | "
        "geglu (gated: silu/gelu(x W) * x V)",
        one_of(ACTIVATIONS))
    attn_bias: bool = setting(True, "biases in the Q/K/V and output projections", BOOLEAN)
    qkv_bias: Optional[bool] = setting(
        None, "biases on Q/K/V alone; null = attn_bias (GPT-Neo: false, bias on the output only)", optional_boolean)
    mlp_bias: bool = setting(True, "biases in the MLP layers", BOOLEAN)
    dropout: float = setting(0.0, "embeddings, attention probabilities, residual branches", DROPOUT)
    layer_norm_eps: float = setting(1e-5, "epsilon of every norm (LayerNorm or RMSNorm)", POSITIVE_EPS)
    # Sparse attention ([S3], GPT-3): layer i uses attn_pattern[i % len(attn_pattern)].
    attn_pattern: list[str] = setting(
        ["dense"], "kinds cycled over layers: dense | local | strided | short (local with half the window), e.g. "
        "[dense, local] as GPT-3", attention_pattern)
    attn_window: int = setting(256, "w: local sees keys i-w < j <= i, strided sees j <= i with (i-j) % w == 0", WINDOW)
    attn_impl: str = setting("auto", "auto | sdpa (masked dense, the reference) | chunked (O(T*w), CPU+GPU) | flex "
                             "(GPU) | flash (flash-attn's window, local layers, CUDA bf16/fp16)", one_of(ATTN_IMPLS))
    attn_scale: Optional[float] = setting(
        None, "scores times this; null = 1/sqrt(D_K) (eq. 5); GPT-Neo checkpoints use 1.0; mup: the base width's, / r",
        SCALE)
    # Post-GPT-3 toggles (GPT-2 -> LLaMA and the speedrun tricks); all off = GPT-2/3 exactly.
    norm_type: str = setting(
        "layernorm", "layernorm | rmsnorm (no mean, no bias), for every norm: pre, post, final and qk_norm",
        one_of(NORMS))
    rope_theta: float = setting(
        10000.0, "RoPE base (pos_emb=rope): pair i of a head turns by position * theta^(-2i/R)", THETA)
    rope_fraction: float = setting(
        1.0, "share of each head's dims RoPE rotates, R = fraction * head_dim (GPT-J/NeoX: 0.25)", rope_fraction)
    qk_norm: bool = setting(
        False, "normalise each head's queries and keys (norm_type, learned gain) before Q K^T", BOOLEAN)
    z_loss: float = setting(
        0.0, "PaLM auxiliary loss: + z_loss * mean(log^2 Z) on the training loss (PaLM: 1e-4); 0 = off", Z_LOSS)
    logit_softcap: Optional[float] = setting(
        None, "cap the output logits at c * tanh(logits / c) (Gemma 2: 30); null = no cap", SOFTCAP)
    pad_vocab_to: Optional[int] = setting(
        None, "round the embedding/head rows up to a multiple of this (64: 50257 → 50304); null = d (conf/: 64 on "
        "CUDA GPUs)", OPTIONAL_POSITIVE)
    parametrization: str = setting(
        "standard",
        "standard (GPT-2's N(0, 0.02), residual projections / sqrt(2M)) | mup (Tensor Programs V: hidden init / "
        "sqrt(r), hidden Adam lr / r, logits / r, scores 1/D_K; r = n_embd / mup_base_width; docs/mup.md)",
        one_of(PARAMETRIZATIONS))
    mup_base_width: int = setting(
        128, "parametrization=mup: an integer >= 1, the n_embd whose best lr wider models share (r = n_embd / "
        "this; r = 1 is standard)", POSITIVE)
    # The GPT-2 speedrun's model-side choices (modded-nanogpt; docs/model.md, "The speedrun's choices"), each citing
    # the record that introduced it; all off = GPT-2 exactly. model=speedrun_nano / speedrun turn them all on.
    zero_init_proj: list[str] = setting(
        [], "projections that start at zero: attn (W_O) and/or mlp (f_L) (record #5, 2024-10-14); [] = GPT-2's init",
        projections)
    init_scale: Optional[float] = setting(
        None, "the other hidden matrices ~ U(+-sqrt(3) s / sqrt(fan_in)), std s / sqrt(fan_in) (record #64, "
        "2026-01-30: s = 0.5); null = GPT-2's N(0, 0.02)", SCALE_OR_NULL)
    value_embed_layers: list[int] = setting(
        [], "blocks whose attention values get v += VE_l[token], an extra embedding per block (record #14, "
        "2024-12-04); [] = none", layer_list)
    value_embed_gate: bool = setting(
        False, "value embeddings times 2 sigmoid(w_h . [x[:6], VE[:6]]) per head, w_h from 0 (record #55, "
        "2025-12-29)", BOOLEAN)
    x0_mix: bool = setting(
        False, "each block reads x + b_l x0, x0 the embedding output, b_l learned from 0 (record #9, 2024-11-06)",
        BOOLEAN)
    skips: list[list[int]] = setting(
        [], "[from, to] block pairs: block to reads x + sigmoid(g) h_from, h_from block from's output, g learned "
        "from -1.5 (U-net skips: record #11, 2024-11-10; one gated skip: records #45, #55); [] = none", skip_pairs)
    residual_scalars: bool = setting(
        False, "every sublayer x <- a x + c F(x), a learned from sqrt(1.1), c from 1 (records #45, 2025-11-18, and "
        "#73, 2026-02-12)", BOOLEAN)
    smear: bool = setting(
        False, "embedding e_t += lambda sigmoid(w . e_t[:12]) e_(t-1), lambda and w learned from 0 (record #34, "
        "2025-09-18)", BOOLEAN)
    logit_sigmoid_cap: Optional[list[float]] = setting(
        None, "[A, B, C]: logits A sigmoid((z + B) / C), the record's [23, 5, 7.5] (record #54, 2025-12-26); "
        "null = none (logit_softcap is the tanh form)", sigmoid_cap)
    no_attn_layers: list[int] = setting(
        [], "blocks without attention (records #17, 2024-12-17, and #35, 2025-09-21); [] = none", layer_list)
    no_mlp_layers: list[int] = setting(
        [], "blocks without an MLP (record #30, 2025-09-05); [] = none", layer_list)
    bigram_vocab: int = setting(
        0, "rows R of the bigram hash embedding: e_t += B[hash(t_(t-1), t_t) mod (R-1)], B from 0 (record #62, "
        "2026-01-19); 0 = off", BIGRAM_ROWS)
    mtp_weights: list[float] = setting(
        [], "multi-token prediction: + w_k CE(logits_t, token_(t+1+k)) for k = 1.. from the same head (record #53, "
        "2025-12-22); [] = next token only", weights)
    mtp_weights_end: Optional[list[float]] = setting(
        None, "the mtp_weights at the end of training, reached linearly from mtp_weights over the steps (record #53's "
        "schedule, as one ramp); null (or []) = constant", weights)

    # Training-side speedrun choices (issue 44; docs/model.md, "Speedrun training schedules"); off = GPT-2/3 exactly.
    untie_at: Optional[float] = setting(
        None, "a tied head becomes its own parameter at this fraction of trainer.max_steps, starting from the tied "
        "weight (modded-nanogpt record 53: 0.67); null = tied throughout (model.tie_weights)", UNTIE_AT)

    def __post_init__(self) -> None:
        check_declared(self, "model.")  # each field's own check, declared with it above
        for rule in RULES:  # then the rules between fields
            rule(self)
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
        self.skips = [list(p) for p in self.skips]

    def layer_kind(self, layer: int) -> str:
        """The attention kind of block `layer` (0-based): the pattern, cycled; a short layer is a local one."""
        kind = self.attn_pattern[layer % len(self.attn_pattern)]
        return "local" if kind == SHORT else kind

    def layer_window(self, layer: int, window: Optional[int] = None) -> int:
        """The band w of block `layer` for the model's window (attn_window, or a stage's, gptlab.train.stages): half
        of it, at least 1, on a short layer."""
        window = self.attn_window if window is None else window
        return max(1, window // 2) if self.attn_pattern[layer % len(self.attn_pattern)] == SHORT else window

    @property
    def qk_head_dim(self) -> int:
        """D_K: head_dim, or n_embd / n_head when it is not set."""
        return self.head_dim if self.head_dim is not None else self.n_embd // self.n_head

    @property
    def rotary_dim(self) -> int:
        """R: how many dimensions of each query/key head RoPE rotates, exactly rope_fraction * D_K (an even number:
        `rotary_pairs` refuses a fraction that lands between pairs)."""
        return round(self.qk_head_dim * self.rope_fraction)

    @property
    def width_mult(self) -> float:
        """muP's r = n_embd / mup_base_width; 1 under the standard parametrization (which ignores the base)."""
        return self.n_embd / self.mup_base_width if self.parametrization == "mup" else 1.0

    @property
    def scores_scale(self) -> Optional[float]:
        """The factor on Q K^T the attention uses (None = 1/sqrt(D_K)): attn_scale, or muP's 1/D_K form of it."""
        return PARAMETRIZATIONS[self.parametrization].attn_scale(self.attn_scale, self.head_dim, self.width_mult)

    @property
    def sinusoidal_mult(self) -> float:
        """The factor on the sinusoidal table: sinusoidal_scale, or 1/sqrt(D) at the base width (n_embd / r), so
        under muP the position vectors, like the token embeddings, do not change size as the model widens."""
        if self.sinusoidal_scale is not None:
            return self.sinusoidal_scale
        return (self.n_embd / self.width_mult) ** -0.5

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
        written before the runtime flags left the architecture still carry them: they are dropped; ones written
        before a field was added lack it: it takes the value they were trained with (ADDED_FIELDS_BEFORE)."""
        known = {f.name for f in fields(cls)}
        values = {**ADDED_FIELDS_BEFORE, **{k: v for k, v in values.items() if k not in RUNTIME_FIELDS_BEFORE}}
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


# The rules between GPTConfig's fields, each one function; every field passed its own check first.
def heads_divide_width(cfg: GPTConfig) -> None:
    if cfg.head_dim is None and cfg.n_embd % cfg.n_head:
        raise ConfigError(
            f"model.n_embd={cfg.n_embd} is not divisible by model.n_head={cfg.n_head}; "
            f"{heads_that_divide(cfg.n_embd, cfg.n_head)}."
        )


def heads_that_divide(n_embd: int, n_head: int) -> str:
    """The way out of an n_head that does not divide n_embd: the nearest head counts that do, or a head_dim."""
    divisors = [h for h in range(1, n_embd + 1) if n_embd % h == 0]
    nearest = sorted(divisors, key=lambda h: (abs(h - n_head), h))[:2]
    ways = f"use model.n_head={' or '.join(str(h) for h in sorted(nearest))} (dividing {n_embd})"
    if n_embd // n_head:
        ways += f", or set model.head_dim={n_embd // n_head} (D_K; H x D_K need not equal n_embd)"
    return ways


def rotary_pairs(cfg: GPTConfig) -> None:
    """pos_emb=rope: RoPE rotates pairs of dims, so rope_fraction * D_K must be an even count >= 2; anything else used
    to be rounded down in silence (0.3 of 64 rotated 18 dims, a head_dim of 7 rotated 6)."""
    if cfg.pos_emb != "rope":
        return
    D = cfg.qk_head_dim
    dims = D * cfg.rope_fraction
    if abs(dims - round(dims)) < 1e-6 and round(dims) % 2 == 0 and round(dims) >= 2:
        return
    head = f"model.head_dim={cfg.head_dim}" if cfg.head_dim is not None else \
        f"head_dim n_embd / n_head = {D}"
    below, above = int(dims) // 2 * 2, int(dims) // 2 * 2 + 2
    fractions = [f"{k / D!r} ({k} of {D} dims)" for k in (below, above) if 2 <= k <= D]
    ways = [f"model.rope_fraction={' or '.join(fractions)}"] if fractions else []
    if cfg.rope_fraction == 1.0:
        ways.append(f"an even model.head_dim ({D - 1 if D % 2 else D - 2} or {D + 1 if D % 2 else D + 2})")
    else:
        ways.append("another model.head_dim")
    raise ConfigError(
        f"model.rope_fraction={cfg.rope_fraction} of {head} is {dims:g} dimensions, but RoPE rotates whole pairs: "
        f"rope_fraction x head_dim must be an even number >= 2. Use {', or '.join(ways)}."
    )


RULES: tuple[Callable[[GPTConfig], None], ...] = (heads_divide_width, rotary_pairs, *SPEEDRUN_RULES)


def default_d_ff(n_embd: int, activation: str) -> int:
    """4 D; for a gated MLP (3 matrices of D x d_ff instead of 2) the width with the same parameters,
    8 D / 3, rounded to the nearest multiple of 64 (at least 64) so matmuls stay on round sizes: D=768 -> 2048."""
    if not ACTIVATIONS[activation].gated:
        return 4 * n_embd
    return max(64, round(8 * n_embd / 3 / 64) * 64)
