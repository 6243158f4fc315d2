"""Rules between fields of different groups, each beside the fields it constrains in one table: a config whose
fields are each valid can still be one that cannot run."""

from __future__ import annotations

from typing import Any, Callable, Optional

from hydra.utils import get_object
from omegaconf import DictConfig

from gptlab.config import budget
from gptlab.config.fsdp_keys import fsdp_strategy_keys, is_fsdp
from gptlab.config.ranges import logged_metric
from gptlab.errors import ConfigError
from gptlab.model.context import longest_context
from gptlab.model.positions import POSITIONS

Rule = Callable[[DictConfig], Optional[str]]  # None = fine, else the message


def windows_fit_the_context(cfg: DictConfig) -> Optional[str]:
    data, model = cfg.get("data"), cfg.get("model")
    if not data or not model or not isinstance(data.get("block_size"), int):
        return None
    if data.block_size > model.block_size:
        learned = model.get("pos_emb") in POSITIONS and longest_context(model) is not None  # type: ignore[arg-type]
        why = (f"the rows of its learned position table (model.pos_emb=learned: {model.block_size} trained vectors, "
               "none for later positions)" if learned else
               f"the context the model is built and trained for (model.pos_emb={model.get('pos_emb')} computes "
               "positions for any length, but the model takes at most model.block_size tokens; to score a checkpoint "
               f"past it, use src/eval.py contexts=[{model.block_size},{2 * model.block_size}])")
        return (f"data.block_size={data.block_size} is longer than model.block_size ({model.block_size}), {why}; "
                "leave data.block_size out (it follows model.block_size) or set it to at most "
                f"{model.block_size}; to train at {data.block_size}, set model.block_size={data.block_size}.")
    return None


# muP's per-layer learning rates are Tensor Programs V's table for Adam; other optimizers scale differently.
MUP_OPTIMIZERS = ("gptlab.train.optim.adamw", "torch.optim.AdamW", "torch.optim.Adam")


def mup_optimizer_refusal(optimizer: str | Callable[..., Any]) -> Optional[str]:
    """Why model.parametrization=mup cannot train with this optimizer (its `_target_`, or the function itself for
    optimizers built in Python: train.optim asks too); None: it can."""
    func = optimizer
    if isinstance(optimizer, str):
        try:
            func = get_object(optimizer)
        except Exception:  # a target that does not import is refused by name when it is instantiated
            return None
    if func in {get_object(t) for t in MUP_OPTIMIZERS}:
        return None
    target = optimizer if isinstance(optimizer, str) else f"{func.__module__}.{func.__qualname__}"
    name = target.rsplit(".", 1)[-1].lower()
    return (f"model.parametrization=mup cannot train with optimizer={name} ({target}): muP's per-layer "
            "learning rates (hidden matrices' lr / r) are Tensor Programs V's rules for Adam, and SGD, Adafactor "
            "and Muon (whose update is already scaled by each matrix's shape) follow other rules. Use "
            "optimizer=adamw, or model.parametrization=standard.")


def mup_trains_with_adam(cfg: DictConfig) -> Optional[str]:
    model, optimizer = cfg.get("model"), cfg.get("optimizer")
    if not model or not optimizer or model.get("parametrization") != "mup":
        return None
    target = optimizer.get("_target_")
    return mup_optimizer_refusal(target) if isinstance(target, str) else None


def muon_needs_whole_matrices(cfg: DictConfig) -> Optional[str]:
    """Muon orthogonalizes whole matrices; FSDP hands each rank a flat shard of them."""
    target = (cfg.get("optimizer") or {}).get("_target_")
    name = target.rsplit(".", 1)[-1] if isinstance(target, str) else None
    if name in ("muon", "normuon") and is_fsdp((cfg.get("trainer") or {}).get("strategy")):
        return (f"optimizer={name} cannot run under trainer=fsdp: FSDP shards each weight matrix across ranks and "
                "Muon's Newton–Schulz step needs the whole matrix. Use trainer=ddp (each rank holds full matrices) or "
                "optimizer=adamw with FSDP.")
    return None


def ckpt_path_or_resume(cfg: DictConfig) -> Optional[str]:
    """A run continues the checkpoint it is given, or its run dir as `resume` says: not both."""
    resume = cfg.get("resume")
    if cfg.get("ckpt_path") is not None and resume is not None:
        return (f"set either ckpt_path or resume={resume}, not both: drop resume to continue from "
                f"ckpt_path={cfg.get('ckpt_path')!r}, or drop ckpt_path.")
    return None


def fused_step_without_loss_scaling(cfg: DictConfig) -> Optional[str]:
    optimizer, trainer = cfg.get("optimizer") or {}, cfg.get("trainer") or {}
    if optimizer.get("fused") is True and trainer.get("precision") == "16-mixed" and trainer.get("gradient_clip_val"):
        return ("optimizer.fused=true cannot clip gradients under trainer.precision=16-mixed: the fused step unscales "
                "the loss-scaled gradients inside itself, after clipping would have seen them scaled. Use "
                "trainer.precision=bf16-mixed (no loss scaling), or optimizer.fused=null.")
    return None


def monitors_name_logged_metrics(cfg: DictConfig) -> Optional[str]:
    """Every callback that picks by a metric (ModelCheckpoint, an added EarlyStopping, ...) names one that training
    logs; Lightning would fail only at the first validation."""
    for name, node in (cfg.get("callbacks") or {}).items():
        monitor = node.get("monitor") if hasattr(node, "get") else None
        if monitor is not None:
            try:
                logged_metric(f"callbacks.{name}.monitor", monitor)
            except ConfigError as err:
                return str(err)
    return None


def whole_model_compile_without_fsdp(cfg: DictConfig) -> Optional[str]:
    """FSDP2 gathers and frees each block's weights in hooks between the blocks: a whole-model graph would break at
    every one of them, so under trainer=fsdp the blocks are compiled one by one."""
    runtime = cfg.get("runtime") or {}
    if is_fsdp((cfg.get("trainer") or {}).get("strategy")) and runtime.get("compile_scope") == "model":
        return ("runtime.compile_scope=model cannot run under trainer=fsdp: FSDP2 gathers each block's weights in "
                "hooks between the blocks, which break a whole-model graph. Use runtime.compile_scope=blocks (or "
                "null, its default there).")
    return None


def stages_fit_the_batch(cfg: DictConfig) -> Optional[str]:
    """stages.seq_lens cut each training window (data.block_size tokens) into whole sequences; stages.batch_sizes take
    rows of each micro-batch (data.batch_size), which must have them (gptlab.train.stages)."""
    stages, data = cfg.get("stages") or {}, cfg.get("data") or {}
    block, batch = data.get("block_size"), data.get("batch_size")
    seq_lens, batch_sizes = stages.get("seq_lens"), stages.get("batch_sizes")
    if seq_lens and isinstance(block, int) and any(block % n for n in seq_lens):
        fits = [n for n in seq_lens if block % n == 0] or [block]
        return (f"stages.seq_lens={list(seq_lens)} must divide data.block_size={block} (each training window is cut "
                f"into whole sequences); use divisors of it, e.g. stages.seq_lens=[{','.join(map(str, fits))}].")
    if batch_sizes and isinstance(batch, int) and max(batch_sizes) > batch:
        return (f"stages.batch_sizes={list(batch_sizes)} asks for more sequences than a micro-batch holds "
                f"(data.batch_size={batch}); set data.batch_size={max(batch_sizes)}, or lower the stages' sizes.")
    return None


def untie_on_one_device(cfg: DictConfig) -> Optional[str]:
    """model.untie_at adds a parameter mid-run: DDP's and FSDP's wrappers registered (and FSDP sharded) the model's
    parameters when training started, so the new one would never be synchronized across ranks."""
    model, trainer = cfg.get("model") or {}, cfg.get("trainer") or {}
    if model.get("untie_at") is None:
        return None
    if is_fsdp(trainer.get("strategy")):
        return (f"model.untie_at={model.get('untie_at')} cannot run under trainer=fsdp: untying adds a parameter "
                "mid-run, and FSDP has sharded the tied one. Use trainer=default, or model.untie_at=null (a head tied "
                "throughout, or untied from the start with tie_weights off).")
    if trainer.get("devices", 1) != 1 or trainer.get("num_nodes", 1) != 1:
        return (f"model.untie_at={model.get('untie_at')} trains on one rank only: untying adds a parameter mid-run, "
                "which DDP, having registered the model's parameters at the start, would not synchronize across "
                "ranks. Use trainer.devices=1 (and trainer.num_nodes=1), or model.untie_at=null (a head tied "
                "throughout, or untied from the start with tie_weights off).")
    return None


RULES: tuple[Rule, ...] = (windows_fit_the_context, mup_trains_with_adam, muon_needs_whole_matrices,
                          fused_step_without_loss_scaling, fsdp_strategy_keys, ckpt_path_or_resume,
                          monitors_name_logged_metrics, whole_model_compile_without_fsdp, stages_fit_the_batch,
                          untie_on_one_device, budget.seconds_without_step_plans)


def check_rules(cfg: DictConfig) -> None:
    for rule in RULES:
        message = rule(cfg)
        if message:
            raise ConfigError(message)
