"""A dataclass per config group option: every key its YAML may set, its type, its one line of help and its range.

Registered in Hydra's ConfigStore (gptlab.config.store) and named in each YAML's `defaults`, so Hydra refuses
a wrong type or an unknown key while it composes. Groups whose node is a constructor call (`_target_`) list the
constructor's keyword arguments that gptlab ships; others a user may append with `+group.key=value` are
checked against the constructor's signature (gptlab.config.validate). The model's schema is GPTConfig itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import gptlab.config.ranges as c
from gptlab.config.budget import check as budget_check
from gptlab.config.fields import setting

# Lightning also names "transformer-engine": it needs NVIDIA Transformer Engine, which gptlab neither installs nor
# tests, so it is not offered.
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")


@dataclass
class Runtime:
    """How the model runs, not what it computes: the same weights and outputs either way. Applied to the plain
    model in one place, gptlab.execution.parallelize."""

    compile: bool = setting(
        "${gptlab.on_cuda:true,false}", "torch.compile the model and its loss (runtime.compile_scope says in which "
        "graphs); on by default on CUDA GPUs, off on CPU (the first steps are slow while it compiles)", c.boolean)
    compile_scope: Optional[str] = setting(
        None, "what one compiled graph covers: model = the model and its loss as one graph (inductor fuses across "
        "blocks and into the loss); blocks = each block on its own, all identical blocks sharing one compiled code, "
        "and the loss on its own (no fp32 logits either way); null = blocks under trainer=fsdp (FSDP2's gathers "
        "run between the blocks, outside the graphs), model otherwise", c.optional(c.choice("model", "blocks")))
    activation_checkpointing: Any = setting(
        None, "what each block keeps for backward: false = everything; true = only its input, the whole block "
        "recomputed (~1/3 more block compute); selective = its matmul and attention outputs, only the elementwise "
        "ops recomputed (no matmul FLOPs; about a third less activation memory than false); null = selective under "
        "trainer=fsdp (most of its speed, and train's memory check proposes true where it does not fit), false "
        "otherwise", c.optional(c.either(c.boolean, c.choice("selective"), wanted="use true, false, selective or "
                                                                               "null")))
    attention_backend: str = setting(
        "auto", "SDPA's kernel for dense causal attention on CUDA: auto = the fastest of cudnn, flash and efficient, "
        "measured at the model's shape when training starts; or one of them, or math; no effect on CPU",
        c.choice("auto", "cudnn", "flash", "efficient", "math"))
    float8: bool = setting(
        False, "float8 matmuls in training (torchao; pip install torchao) for the Linear layers of "
        "runtime.float8_layers whose dims are multiples of 16: GPUs of compute capability >= 8.9 (H100, H200) only",
        c.boolean)
    float8_layers: list[str] = setting(
        ["attention", "mlp"], "which Linear layers runtime.float8 makes float8: attention | mlp | head "
        "(modded-nanogpt: head, record 19; mlp, records 84 and 89: [mlp,head])", c.float8_layers)
    cpu_threads: Optional[int] = setting(
        None, "torch's intra-op CPU threads per rank: null = the cores this process may use (its affinity) less those "
        "busy with other work at start, shared among the machine's ranks (an OMP_NUM_THREADS you set is kept); "
        "N = exactly N (the banner's threads line says which and why)", c.optional(c.integer(1)))

    def checkpointing(self, sharded: bool) -> str:
        """"none" | "full" | "selective": activation_checkpointing with its null resolved."""
        return checkpoint_mode(self.activation_checkpointing, sharded)

    def compiled_scope(self, sharded: bool) -> Optional[str]:
        """None (compile off) | "model" | "blocks": compile_scope with its null resolved."""
        if not self.compile:
            return None
        return self.compile_scope or ("blocks" if sharded else "model")


def checkpoint_mode(activation_checkpointing: Any, sharded: bool) -> str:
    """runtime.activation_checkpointing as a mode, null resolved (selective under FSDP): the one rule that
    parallelize, the planner and train's memory check all follow."""
    if activation_checkpointing is None:
        return "selective" if sharded else "none"
    if activation_checkpointing == "selective":
        return "selective"
    return "full" if activation_checkpointing else "none"


@dataclass
class Stages:
    """Schedules over training (gptlab.train.stages; docs/model.md, "Speedrun training schedules"): each list splits
    trainer.max_steps into equal stages, one value each, as the speedrun's stages; null = off (GPT-2/3 exactly)."""

    windows: Optional[list[int]] = setting(
        None, "the local layers' band w per stage (a short layer: w // 2); validation and evaluation use "
        "model.attn_window (modded-nanogpt record 13: window warmup; record 29: [384,896,1408])",
        c.optional(c.stage_values("[64,128,256]")))
    seq_lens: Optional[list[int]] = setting(
        None, "each training window cut into sequences of this many tokens per stage (divisors of data.block_size; "
        "the tokens per step stay; record 72: [896,2048])", c.optional(c.stage_values("[64,128,256]")))
    batch_sizes: Optional[list[int]] = setting(
        None, "sequences per micro-batch per stage (at most data.batch_size; the loader's other rows are skipped), "
        "the lr times (batch_size / batch_sizes[0])^batch_lr_exponent (record 46: [8,16,24])",
        c.optional(c.stage_values("[8,16,32]")))
    batch_lr_exponent: float = setting(
        0.6, "p in lr x (b / b_0)^p for stages.batch_sizes (record 46: 0.6; 1 = linear, 0.5 = square root)",
        c.number(0.0, 2.0))


@dataclass
class Train:
    """conf/train.yaml's own keys; each group's node has its own schema."""

    name: str = setting("train", "names the run and sweep dirs; experiments set their own", c.text)
    seed: int = setting(1337, "seeds python, numpy and torch on every rank, and the data sampler", c.seed)
    paired_seeds: bool = setting(
        True, "true: a seed is the same data order in every variant of a sweep and the same initial weights for "
        "the tensors variants share (the report's paired test); false: drawn per variant too (independent arms)",
        c.boolean)
    ladder_tokens_per_param: Optional[float] = setting(
        None, "scaling ladders: tokens per non-embedding parameter each size trains on (experiment=ladder_*)",
        c.optional(c.number(0.0, low_open=True)))
    global_batch_tokens: Optional[int] = setting(
        None, "tokens per optimizer step (GPT-3 Small: 524288): sets gradient accumulation", c.optional(c.positive_int))
    label_smoothing: float = setting(0.0, "eq. 12's soft targets: 0 = plain next-token NLL (eq. 13)",
                                     c.number(0.0, 1.0, high_open=True))
    nonfinite_check_every: int = setting(
        10, "steps between host reads of the on-device NaN/inf loss flag (also read before checkpoints)",
        c.positive_int)
    ckpt_path: Optional[str] = setting(
        None, "a checkpoint (or a run dir: its newest readable one) to continue from exactly (model, optimizer, "
        "scheduler, RNG, data position)", c.optional(c.text))
    resume: Optional[str] = setting(
        None, "null: a new run (refused in a dir that holds checkpoints) | auto: continue from the newest checkpoint "
        "that loads in hydra.run.dir (a finished run is left as it is) | restart: start over there, deleting its "
        "checkpoints, summary and events", c.optional(c.choice("auto", "restart")))
    print_config: bool = setting(
        False, "true also prints the resolved config at start (it is always in <run dir>/config_resolved.yaml)",
        c.boolean)
    float32_matmul_precision: str = setting(
        "high", "fp32 matmuls on TF32 tensor cores (Ampere and later GPUs; no effect on CPU); highest = exact fp32",
        c.choice("highest", "high", "medium"))
    check_memory: bool = setting(
        True, "refuse a run whose estimated memory (weights, grads, Adam, activations) exceeds free RAM/GPU memory",
        c.boolean)
    budget: Optional[str] = setting(
        None, "bounds the run, one key: tokens:2e6 or flops:1e12 (sets trainer.max_steps) | seconds:300 (seconds of "
        "training steps; the lr schedule runs over them): docs/campaigns.md#budgets", budget_check)
    campaign: Optional[str] = setting(
        None, "with -m: record the sweep in this campaign's ledger when it ends and test its variants "
        "(scripts/campaign.py, docs/campaigns.md)", c.optional(c.text))
    runtime: Runtime = setting(Runtime(), "how the model runs: compile, checkpointing, attention kernel, float8")
    stages: Stages = setting(Stages(), "schedules over training: attention window, sequence length, batch size")
    # The groups: each node is typed by its own option's schema when its YAML is composed.
    model: Any = None
    tokenizer: Any = None
    data: Any = None
    optimizer: Any = None
    scheduler: Any = None
    trainer: Any = None
    callbacks: Any = None
    logger: Any = None
    paths: Any = None


@dataclass
class Paths:
    log_dir: str = setting("outputs", "all runs and sweeps", c.writable_dir)
    output_dir: str = setting("${gptlab.output_dir:}", "this job's run dir (Hydra creates it)",
                              c.writable_dir)
    tracking_uri: str = setting("sqlite:///${paths.log_dir}/mlflow.db",
                                "the MLflow store logger=mlflow writes to: an SQLite file under log_dir (no server), "
                                "or a server's http://host:5000", c.text)


@dataclass
class ByteTokenizer:
    _target_: str = "gptlab.data.tokenizers.ByteTokenizer"


@dataclass
class TiktokenTokenizer:
    _target_: str = "gptlab.data.tokenizers.TiktokenTokenizer"
    encoding: str = setting("gpt2", "gpt2 | r50k_base | cl100k_base", c.choice("gpt2", "r50k_base", "cl100k_base"))
    ranks_file: Optional[str] = setting(
        None, "local .tiktoken ranks file for air-gapped machines; null = data/cache/tiktoken/<encoding>.tiktoken "
        "(or $GPTLAB_RANKS_DIR) if there, else tiktoken downloads", c.optional(c.text))


@dataclass
class Data:
    _target_: str = "gptlab.data.GPTDataModule"
    source: Any = setting(
        help="the corpus: a node with _target_ (gptlab.data.sources.BuiltinSource | TextFiles | HFDataset)",
        check=c.node_with_target("gptlab.data.sources.BuiltinSource,name:pydocs", "conf/data/"))
    store: str = setting("prepared", "memory (tokenize at start, hold in RAM) | prepared (shards on disk, memmap) | "
                         "streaming", c.choice("memory", "prepared", "streaming"))
    cache_dir: str = setting(help="prepared: shards go to <cache_dir>/<tokenizer name>/ (relative to the launch dir)",
                             check=c.writable_dir)
    # Optional only as a type: eval.py's is null until the checkpoint gives its model (`--cfg job --resolve` shows
    # it so); the check refuses null.
    block_size: Optional[int] = setting("${model.block_size}",
                                        "windows are block_size + 1 tokens (inputs and shifted targets)",
                                        c.positive_int)
    batch_size: int = setting(32, "micro-batch: windows per device per forward/backward", c.positive_int)
    val_fraction: float = setting(
        0.01, "about this share of documents is held out (chosen by a hash of each document's text)",
        c.number(0.0, 1.0, low_open=True, high_open=True))
    sampling: str = setting("random", "random (nanoGPT) | epoch (each non-overlapping window once per epoch); "
                            "memory, prepared", c.choice("random", "epoch"))
    samples_per_epoch: Optional[int] = setting(
        None, "random sampling (a mixture: either): windows per epoch; null = train tokens // block_size",
        c.optional(c.positive_int))
    shard_tokens: int = setting(
        100_000_000, "prepared: train tokens per shard file (a shard is cut at the next task boundary)",
        c.positive_int)
    num_proc: Optional[int] = setting(
        None, "tokenizer processes: prepared, null = all CPU cores; memory, null = 1", c.optional(c.positive_int))
    verify_sha256: bool = setting(
        True, "prepared: hash every shard against the manifest at startup (catches tampered files)", c.boolean)
    document_masking: bool = setting(
        False, "true: attention stays inside each document of a packed window, positions restart per document",
        c.boolean)
    val_windows: int = setting(64, "streaming: validation windows read from the start of the val documents",
                               c.positive_int)
    num_workers: int = setting(
        0, "DataLoader workers; streaming tokenizes in them (at most one per dataset shard)", c.non_negative_int)
    seed: int = setting("${seed}", "which random windows are drawn, and the per-epoch order", c.seed)


# ---- optimizers: `_partial_`, the module passes the parameter groups -----------------------------------------
@dataclass
class AdamW:
    _target_: str = "gptlab.train.optim.adamw"
    _partial_: bool = True
    lr: float = setting(4.0e-3, "peak lr after warmup, tuned for nano; GPT-2/3 recipes (conf/experiment) use 6e-4",
                        c.number(0.0, 10.0, low_open=True))
    betas: list[float] = setting([0.9, 0.95], "GPT-3's beta_2 = 0.95", c.betas)
    eps: float = setting(1.0e-8, "added to the denominator's square root, for stability",
                         c.number(0.0, 1.0, low_open=True))
    weight_decay: float = setting(0.1, "applied to matrices and embeddings only", c.number(0.0, 1.0))
    fused: Optional[bool] = setting(
        None, "null = torch's fused kernel wherever every parameter's device has one (CUDA, CPU), except under "
        "trainer.precision=16-mixed, whose loss scaling a fused step would hide from gradient clipping; true | "
        "false to force", c.optional(c.boolean))


@dataclass
class SGD:
    _target_: str = "torch.optim.SGD"
    _partial_: bool = True
    lr: float = setting(0.1, "peak learning rate; SGD needs a much larger one than AdamW",
                        c.number(0.0, 10.0, low_open=True))
    momentum: float = setting(0.9, "heavy-ball momentum factor", c.number(0.0, 1.0, high_open=True))
    nesterov: bool = setting(True, "Nesterov's look-ahead form of momentum", c.boolean)
    weight_decay: float = setting(0.0, "applied to >=2-D weights only (the module builds the groups)",
                                  c.number(0.0, 1.0))


@dataclass
class Muon:
    _target_: str = "gptlab.train.muon.muon"
    _partial_: bool = True
    lr: float = setting(4.0e-3, "peak lr of both parts (Muon's matrices and AdamW's embeddings, head, gains, biases)",
                        c.number(0.0, 10.0, low_open=True))
    weight_decay: float = setting(0.1, "decoupled, on matrices and embeddings, not gains or biases", c.number(0.0, 1.0))
    momentum: float = setting(0.95, "Muon's momentum, on the hidden matrices", c.number(0.0, 1.0, high_open=True))
    nesterov: bool = setting(True, "Nesterov's look-ahead form of Muon's momentum", c.boolean)
    ns_steps: int = setting(5, "Newton-Schulz iterations that orthogonalize the momentum", c.positive_int)
    adjust_lr_fn: Optional[str] = setting(
        "match_rms_adamw", "match_rms_adamw (AdamW's lr and weight decay carry over) | original (Keller Jordan's "
        "scale, lr ~0.02)", c.optional(c.choice("original", "match_rms_adamw")))
    betas: list[float] = setting([0.9, 0.95], "the AdamW part's betas, as optimizer=adamw", c.betas)
    eps: float = setting(1.0e-8, "the AdamW part's eps", c.number(0.0, 1.0, low_open=True))


@dataclass
class NorMuon:
    """The speedrun's optimizer split (gptlab.train.normuon): NorMuon on the hidden matrices, Adam on the embeddings,
    the head and the scalars, each part with its own lr. Defaults: modded-nanogpt record 41 (2025-10-24)."""

    _target_: str = "gptlab.train.normuon.normuon"
    _partial_: bool = True
    lr: float = setting(0.06, "NorMuon's peak lr on the hidden matrices, times max(1, rows/cols)^0.5 per matrix",
                        c.number(0.0, 10.0, low_open=True))
    embed_lr: float = setting(0.6, "Adam's peak lr on the embeddings other than a tied head (record: 75 x 0.008)",
                              c.number(0.0, 10.0, low_open=True))
    head_lr: float = setting(0.008, "Adam's peak lr on the head (and on the token embedding while it is tied to it)",
                             c.number(0.0, 10.0, low_open=True))
    scalar_lr: float = setting(0.04, "Adam's peak lr on gains and biases (record: 5 x 0.008)",
                               c.number(0.0, 10.0, low_open=True))
    weight_decay: float = setting(0.0, "decoupled, on the hidden matrices: W <- W (1 - lr wd)", c.number(0.0, 10.0))
    momentum: float = setting(0.95, "NorMuon's Nesterov momentum", c.number(0.0, 1.0, high_open=True))
    beta2: float = setting(0.95, "NorMuon's per-neuron second-moment EMA", c.number(0.0, 1.0, high_open=True))
    ns_steps: int = setting(5, "Newton-Schulz iterations that orthogonalize the momentum", c.positive_int)
    adam_betas: list[float] = setting([0.65, 0.95], "the Adam part's betas", c.betas)
    adam_eps: float = setting(1.0e-8, "the Adam part's eps", c.number(0.0, 1.0, low_open=True))
    adam_weight_decay: float = setting(0.0, "decoupled, on the embeddings and the head (never on gains or biases)",
                                       c.number(0.0, 1.0))


@dataclass
class Adafactor:
    _target_: str = "torch.optim.Adafactor"
    _partial_: bool = True
    lr: float = setting(1.0e-2, "peak learning rate (Adafactor scales steps by the parameter RMS)",
                        c.number(0.0, 10.0, low_open=True))
    beta2_decay: float = setting(-0.8, "second-moment decay exponent of the paper", c.number(-1.0, 0.0))
    weight_decay: float = setting(0.0, "applied to >=2-D weights only (the module builds the groups)",
                                  c.number(0.0, 1.0))


# ---- lr schedules: `_partial_`, called with (optimizer, total_steps) -----------------------------------------
WARMUP = "optimizer steps of linear warmup from 0"


@dataclass
class Cosine:
    _target_: str = "gptlab.train.optim.warmup_cosine"
    _partial_: bool = True
    warmup_steps: int = setting(20, WARMUP, c.non_negative_int)
    min_lr_ratio: float = setting(0.1, "final lr as a fraction of the peak", c.number(0.0, 1.0))


@dataclass
class WarmupStableDecay:
    _target_: str = "gptlab.train.optim.warmup_stable_decay"
    _partial_: bool = True
    warmup_steps: int = setting(30, WARMUP, c.non_negative_int)
    decay_fraction: float = setting(0.2, "share of max_steps spent decaying at the end",
                                    c.number(0.0, 1.0, low_open=True))
    min_lr_ratio: float = setting(0.0, "final lr as a fraction of the peak", c.number(0.0, 1.0))


@dataclass
class Constant:
    _target_: str = "gptlab.train.optim.constant"
    _partial_: bool = True
    warmup_steps: int = setting(30, f"{WARMUP}; 0 = the peak from the first step", c.non_negative_int)


# ---- the Lightning Trainer -----------------------------------------------------------------------------------
@dataclass
class Trainer:
    """The Trainer arguments conf/trainer/ sets. Any other `lightning.pytorch.Trainer` argument may be appended
    (`+trainer.limit_train_batches=5`): it is checked against the Trainer's signature, and by `appended` below
    where gptlab knows its range. The schema lists only the shipped keys, not the ~50 of the signature, so the
    composed config passes Lightning exactly what the YAML says and Lightning's own defaults stay its own."""

    _target_: str = "lightning.pytorch.Trainer"
    default_root_dir: Optional[str] = setting("${paths.output_dir}", "Lightning's own files go to the run dir",
                                              c.optional(c.text))
    accelerator: str = setting("auto", "auto | cpu | gpu | mps", c.choice("auto", "cpu", "gpu", "cuda", "mps"))
    strategy: Any = setting("auto", "auto | ddp | a node with _target_ (trainer=fsdp)")
    devices: Any = setting(1, "devices per node; >1 needs trainer=ddp",
                           c.either(c.positive_int, c.choice("auto"),
                                    wanted="use a positive integer (devices per node) or auto"))
    num_nodes: int = setting(1, "machines; devices x num_nodes ranks in all", c.positive_int)
    precision: str = setting("${gptlab.cuda_precision:}", "bf16-mixed on GPUs that have bf16 (Ampere and later), "
                             "else 32-true; or 16-mixed (older GPUs, with loss scaling)", c.choice(*PRECISIONS))
    max_steps: int = setting(240, "optimizer steps; the lr schedule ends here "
                             "(nano on pydocs: ~2 min on 2 CPU cores at load 2 [time: train_default])",
                             c.positive_int)
    max_epochs: int = setting(-1, "bounded by max_steps instead",
                              c.either(c.positive_int, c.choice(-1),
                                       wanted="use -1 (bounded by max_steps) or a positive integer"))
    val_check_interval: Any = setting(
        80, "validate every N optimizer steps (gptlab scales Lightning's micro-batch count); every run also "
        "validates at its last step, so each run has a final and best val/loss",
        c.either(c.positive_int, c.number(0.0, 1.0, low_open=True),
                 wanted="use a positive integer (optimizer steps) or a fraction in (0, 1]"))
    check_val_every_n_epoch: Optional[int] = setting(None, "let val_check_interval count across epochs",
                                                     c.optional(c.positive_int))
    limit_val_batches: Any = setting(1.0, "fraction (or count) of val windows per validation",
                                     c.either(c.non_negative_int, c.number(0.0, 1.0),
                                              wanted="use a count of batches or a fraction in [0, 1]"))
    num_sanity_val_steps: int = setting(0, "the first real validation comes soon enough", c.integer(-1))
    log_every_n_steps: int = setting(10, "steps between logged training scalars", c.positive_int)
    gradient_clip_val: Optional[float] = setting(1.0, "clip the global grad norm, as GPT-3",
                                                 c.optional(c.number(0.0)))
    accumulate_grad_batches: int = setting(1, "or set global_batch_tokens and let gptlab derive it", c.positive_int)
    deterministic: Any = setting(
        False, "true = deterministic torch kernels (slower); warn = only warn where none exists",
        c.either(c.boolean, c.choice("warn"), wanted="use true, false or warn"))
    use_distributed_sampler: bool = setting(False, "gptlab's EpochSampler splits windows across ranks itself",
                                            c.boolean)
    fast_dev_run: Any = setting(
        False, "true (or N) runs N batches of train and val, no checkpoints: a smoke test",
        c.either(c.boolean, c.positive_int, wanted="use true, false or a positive number of batches"))
    profiler: Any = setting(None, "Lightning's profiler: null = off; debug=profile sets torch's, with a trace in the "
                            "run dir", c.optional(c.node_with_target("lightning.pytorch.profilers.SimpleProfiler",
                                                                       "conf/debug/profile.yaml")))
    enable_model_summary: bool = setting(
        False, "true prints Lightning's module table; the start banner already gives the parameters", c.boolean)

    # Checks of Trainer arguments the YAML does not set, for when a user appends them with `+trainer.<key>=`.
    appended: ClassVar[dict[str, c.Check]] = {
        "limit_train_batches": c.either(c.positive_int, c.number(0.0, 1.0, low_open=True),
                                        wanted="use a count of batches or a fraction in (0, 1]"),
        "enable_progress_bar": c.boolean,
        "enable_checkpointing": c.boolean,
        "benchmark": c.optional(c.boolean),
    }
