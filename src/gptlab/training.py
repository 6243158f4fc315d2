"""`train(cfg)`: compose the objects a Hydra config names, fit, and return the best val/loss."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Optional

import hydra
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from gptlab.errors import ConfigError
from gptlab.hydra_ddp import ddp_job_scope
from gptlab.lit_module import GPTLitModule
from gptlab.model import GPT, GPTConfig
from gptlab.utils import atomic_write_text, instantiate_dict

log = logging.getLogger(__name__)

SUMMARY_FILE = "run_summary.json"  # what a finished run measured; read by scripts/ablation_report.py


def build_model_config(model_cfg: Any, vocab_size: int) -> GPTConfig:
    """The preset, with vocab_size taken from the tokenizer when the preset leaves it null."""
    values = dict(OmegaConf.to_container(model_cfg, resolve=True)) if isinstance(model_cfg, DictConfig) else dict(model_cfg)
    if values.get("vocab_size") is None:
        values["vocab_size"] = vocab_size
    elif values["vocab_size"] < vocab_size:
        raise ConfigError(
            f"the tokenizer has {vocab_size} ids but model.vocab_size={values['vocab_size']}; "
            f"set model.vocab_size >= {vocab_size} or null to take it from the tokenizer."
        )
    return GPTConfig.from_dict(values)


def save_resolved_config(cfg: DictConfig, output_dir: Path) -> None:
    text = OmegaConf.to_yaml(cfg, resolve=True)
    log.info("Resolved config:\n%s", text)
    atomic_write_text(output_dir / "config_resolved.yaml", text)


def train(cfg: DictConfig) -> Optional[float]:
    with ddp_job_scope():
        return _train(cfg)


def _train(cfg: DictConfig) -> Optional[float]:
    output_dir = Path(cfg.paths.output_dir)
    L.seed_everything(cfg.seed, workers=True)

    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model_cfg = build_model_config(cfg.model, tokenizer.vocab_size)  # before anything slow: fail fast
    datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
    model = GPT(model_cfg)
    module = GPTLitModule(
        model,
        optimizer=hydra.utils.instantiate(cfg.optimizer),
        scheduler=hydra.utils.instantiate(cfg.scheduler) if cfg.get("scheduler") else None,
        label_smoothing=cfg.label_smoothing,
    )
    callbacks = list(instantiate_dict(cfg.get("callbacks")).values())
    loggers = list(instantiate_dict(cfg.get("logger")).values())
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)

    if trainer.is_global_zero:
        save_resolved_config(cfg, output_dir)
        log.info("Model: %s parameters; tokenizer %s (%d ids)", f"{model.num_parameters():,}", tokenizer.name, tokenizer.vocab_size)

    start_step, started = trainer.global_step, time.perf_counter()
    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    fit_seconds = time.perf_counter() - started

    checkpoint = next((c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor == "val/loss"), None)
    best = checkpoint.best_model_score if checkpoint is not None else trainer.callback_metrics.get("val/loss")
    best = None if best is None else float(best)
    if trainer.is_global_zero and not trainer.fast_dev_run:
        tokens_per_step = datamodule.batch_size * model_cfg.block_size * trainer.accumulate_grad_batches * trainer.world_size
        final = trainer.callback_metrics.get("val/loss")
        summary = {
            "name": cfg.name,
            "parameters": model.num_parameters(),
            "best_val_loss": best,
            "final_val_loss": None if final is None else float(final),
            "global_step": trainer.global_step,
            "tokens_per_step": tokens_per_step,
            "tokens_seen": trainer.global_step * tokens_per_step,
            "fit_seconds": fit_seconds,
            "tokens_per_sec": (trainer.global_step - start_step) * tokens_per_step / fit_seconds,
        }
        atomic_write_text(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
    if best is not None:
        log.info("Best val/loss %.4f; run dir %s", best, output_dir)
    return best
