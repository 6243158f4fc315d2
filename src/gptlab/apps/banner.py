"""The few lines a run prints when it starts: what trains on what, where, and where it writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L

from gptlab.config import budget
from gptlab.config.schemas import Runtime
from gptlab.execution.checkpointing import hardware_flops_per_token
from gptlab.model import GPTConfig, training_flops_per_token
from gptlab.model.accounting import padding_parameters

# Presets with GPT-2/3's vocabulary trained on the 257 byte ids leave ~50k embedding rows untrained.
BYTE_TOKENIZER_HINT = "tokenizer=gpt2 (or experiment=gpt2_owt for the whole GPT-2 recipe)"


def vocab_warning(model_cfg: GPTConfig, preset_vocab: Any, tokenizer: Any) -> str | None:
    """One line when a preset sized for a BPE vocabulary runs on the byte tokenizer."""
    if tokenizer.name == "bytes" and isinstance(preset_vocab, int) and preset_vocab > 4 * tokenizer.vocab_size:
        return (f"model.vocab_size={preset_vocab} (a BPE-sized preset) with tokenizer=bytes ({tokenizer.vocab_size} "
                f"ids): {preset_vocab - tokenizer.vocab_size:,} embedding rows will never be trained; use "
                f"{BYTE_TOKENIZER_HINT}.")
    return None


def preset_name() -> str:
    """The model preset chosen on the command line (model=gpt2_small), when Hydra composed the config."""
    from hydra.core.hydra_config import HydraConfig

    return str(HydraConfig.get().runtime.choices.get("model", "custom")) if HydraConfig.initialized() else "custom"


def runtime_line(runtime: Runtime, model_cfg: GPTConfig, sharded: bool) -> str:
    """How the model runs, and the FLOPs per token that MFU (the model's) and HFU (with what checkpointing
    recomputes) count."""
    mode, scope = runtime.checkpointing(sharded), runtime.compiled_scope(sharded)
    model = training_flops_per_token(model_cfg)["total"]
    hardware = hardware_flops_per_token(model_cfg, mode)
    recomputed = f"+{hardware / model - 1:.1%} recomputed" if hardware != model else "no matmul recomputed"
    return (f"runtime  compile {scope or 'off'}, activation checkpointing {mode}; FLOPs per token: model "
            f"{model:,} (x_throughput/mfu), hardware {hardware:,} (x_throughput/hfu, {recomputed})")


def steps_said(cfg: Any, max_steps: int) -> str:
    """The run's length: its steps, and the budget that set them (gptlab.config.budget)."""
    bound = budget.of(cfg)
    if bound is None:
        return f"{max_steps:,} steps"
    if bound.kind == "seconds":
        return f"steps for {bound.amount:g} s of training (budget={bound}; the lr schedule runs over them)"
    return f"{max_steps:,} steps (budget={bound})"


def banner_lines(cfg: Any, model_cfg: GPTConfig, n_params: int, tokenizer: Any, datamodule: Any,
                 trainer: L.Trainer, tokens_per_step: int, output_dir: Path, runtime: Runtime,
                 sharded: bool) -> list[str]:
    """`runtime`, `sharded`: as the preflight pass decided them (early_checks.Checked), not read again."""
    source_name = getattr(getattr(datamodule, "source", None), "name", None) or "?"
    strategy = type(trainer.strategy).__name__.replace("Strategy", "") or "single device"
    padding = padding_parameters(model_cfg)
    padded = f" (+{padding:,} in padding rows, model.pad_vocab_to={model_cfg.pad_vocab_to})" if padding else ""
    return [
        f"model    {preset_name()}: {n_params - padding:,} parameters{padded}, {model_cfg.n_layer} layers x "
        f"{model_cfg.n_embd} wide, context {model_cfg.block_size}",
        f"tokens   tokenizer {tokenizer.name} ({tokenizer.vocab_size:,} ids); data {source_name} "
        f"({cfg.data.get('store')} store)",
        f"step     {tokens_per_step:,} tokens = micro-batch {datamodule.batch_size} x {model_cfg.block_size} x "
        f"{trainer.num_devices} devices x {trainer.num_nodes} nodes x {trainer.accumulate_grad_batches} accumulated; "
        f"{steps_said(cfg, trainer.max_steps)}",
        f"devices  {trainer.num_devices} x {type(trainer.accelerator).__name__.replace('Accelerator', '').lower()} "
        f"per node, {trainer.num_nodes} node(s), strategy {strategy}, precision {trainer.precision}",
        runtime_line(runtime, model_cfg, sharded),
        f"run dir  {output_dir}  (full config: config_resolved.yaml; print_config=true prints it)",
    ]
