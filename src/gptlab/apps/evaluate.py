"""`evaluate(cfg)`: a checkpoint's validation loss, perplexity and bits per byte, computed by the same validation
step as training, so the numbers equal the run's own val/loss and val/bpb on the same data and windows; and with
`tasks`, its zero-shot task metrics (gptlab.eval.zeroshot); with `contexts`, its loss at each of those context lengths
and by position (gptlab.apps.context_eval), for one checkpoint or every job of a sweep dir."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import hydra
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from gptlab.apps.build import instantiate_trainer
from gptlab.apps.context_eval import (
    check_contexts,
    check_scorable,
    evaluate_checkpoint,
    evaluate_sweep,
    is_sweep_dir,
)
from gptlab.atomic import atomic_write_text
from gptlab.checkpoint.reader import (
    check_tokenizer_fits,
    check_tokenizer_matches,
    load_model,
    recorded_tokenizer,
    tokenizer_overrides,
)
from gptlab.config.ranges import boolean, optional, positive_int, writable_dir
from gptlab.config.rules import windows_fit_the_context
from gptlab.config.schemas import Trainer
from gptlab.config.validate import check_fields, check_node
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.errors import ConfigError
from gptlab.eval.val_tokens import overrides_to_reproduce
from gptlab.eval.zeroshot import check_fits, check_tasks, evaluate_tasks, format_table, load_examples
from gptlab.launch import quiet
from gptlab.preflight.guards import check_devices
from gptlab.preflight.option_relevance import EVAL_RULES, eval_defaults, ignored_options
from gptlab.train.module import GPTLitModule

log = logging.getLogger(__name__)
quiet.install()  # as train.py: no device lines, logger adverts or Lightning's internal deprecations


def check_eval_config(cfg: DictConfig) -> None:
    """eval.yaml's own fields and its trainer and data groups, with train's checks, before a checkpoint is read."""
    boolean("val_loss", cfg.val_loss)
    positive_int("task_batch_size", cfg.task_batch_size)
    optional(positive_int)("context_targets", cfg.context_targets)
    for group in ("trainer", "data"):  # fields that interpolate the model's (set from the checkpoint below): left out
        check_node(f"{group}.", cfg[group], set_values_only=True)
    check_fields("trainer.", cfg.trainer, Trainer, set_values_only=True)  # eval.yaml's own trainer, by train's rules
    check_devices(cfg.trainer, training=False)
    writable_dir("paths.output_dir", cfg.paths.output_dir)  # eval.json goes there, after the work


def evaluate_sweep_dir(cfg: DictConfig, tasks: list[str], contexts: list[int]) -> dict[str, float]:
    """A sweep dir as ckpt_path: each finished job scored at `contexts` (gptlab.apps.context_eval)."""
    if not contexts or tasks:
        raise ConfigError(f"ckpt_path={str(cfg.ckpt_path)!r} is a sweep dir: eval.py scores its jobs at context "
                          "lengths only; give contexts=[64,128,256] (and tasks=[]), or one job's run dir "
                          f"(ckpt_path={str(cfg.ckpt_path)}/<job>) for val_loss and tasks.")
    log.info("ckpt_path is a sweep dir: scoring each job at contexts %s (each job's val/loss at its trained context "
             "is its run_summary.json's, copied into eval.json's val/loss)", contexts)
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    summary = evaluate_sweep(cfg, tokenizer, contexts, instantiate_trainer(cfg.trainer))
    print(json.dumps({"sweep_dir": str(cfg.ckpt_path), "jobs": len(summary["jobs"]), "skipped": summary["skipped"]}))
    return {}


def evaluate(cfg: DictConfig) -> dict[str, float]:
    check_eval_config(cfg)
    tasks = check_tasks(cfg.tasks if isinstance(cfg.tasks, str) else list(cfg.tasks))
    contexts = check_contexts(cfg.contexts)
    ignored_options(cfg, in_sweep_job=False, rules=EVAL_RULES, defaults=eval_defaults())
    if is_sweep_dir(Path(cfg.ckpt_path)):
        return evaluate_sweep_dir(cfg, tasks, contexts)
    if not tasks and not cfg.val_loss and not contexts:
        raise ConfigError("val_loss=false, tasks=[] and contexts=[] leave nothing to evaluate; set "
                          "tasks=[lambada,hellaswag], contexts=[64,128,256] or val_loss=true.")
    model, hparams = load_model(cfg.ckpt_path)
    trained_tokenizer = recorded_tokenizer(hparams)
    tokenizer_cfg = OmegaConf.to_container(cfg.tokenizer, resolve=True)
    if trained_tokenizer is not None:
        check_tokenizer_matches(trained_tokenizer, tokenizer_cfg,
                                f"pass the training run's: {tokenizer_overrides(trained_tokenizer)}")
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    fits = ByteTokenizer.vocab_size <= model.config.vocab_size  # eval.yaml's default: what leaving tokenizer out gives
    check_tokenizer_fits(tokenizer, model, "tokenizer (leave tokenizer out: eval's default, the byte tokenizer, "
                         f"has {ByteTokenizer.vocab_size} ids, which fit)" if fits else "tokenizer")
    # Task data first: a missing dataset fails before minutes of validation, not after.
    examples = load_examples(tasks, cfg.task_data, cfg.task_limit) if tasks else {}
    with open_dict(cfg):
        cfg.model = hparams["model"]  # data.block_size interpolates ${model.block_size}
    too_long = windows_fit_the_context(cfg)  # train's rule, now that the model's context is known
    if too_long:
        raise ConfigError(too_long)
    check_fits(examples, tokenizer, model.config.block_size, "task_data", "")  # before minutes of validation
    check_scorable(model, contexts, cfg.trainer.accelerator)  # so are the contexts it cannot be scored at
    trainer: L.Trainer = instantiate_trainer(cfg.trainer)
    metrics: dict[str, float] = {}
    if cfg.val_loss:
        datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
        module = GPTLitModule(model, token_bytes=torch.from_numpy(tokenizer.token_byte_lengths()))
        results = trainer.validate(module, datamodule=datamodule, verbose=False)[0]
        metrics = {"val/loss": float(results["val/loss"]), "val/ppl": math.exp(float(results["val/loss"])),
                   "val/bpb": float(results["val/bpb"])}
        wanted = overrides_to_reproduce(hparams.get("run"), OmegaConf.to_container(cfg.data, resolve=True),
                                        OmegaConf.to_container(cfg.trainer, resolve=True))
        if wanted:
            log.info("note: this val/loss scores other validation tokens than the checkpoint's run scored, so it "
                     "differs from the one the run logged (both are right for their tokens); to score the run's own, "
                     "pass: %s", " ".join(wanted))
    if tasks:
        model.to(trainer.strategy.root_device)  # validate() hands the model back on the CPU
        with trainer.precision_plugin.forward_context():  # trainer.precision, as for val/loss
            metrics |= evaluate_tasks(model, tokenizer, examples, cfg.task_batch_size)
    if contexts:
        metrics |= evaluate_checkpoint(model, cfg, tokenizer, contexts, trainer)
    if trainer.is_global_zero:
        if "val/loss" in metrics:
            log.info("%s: val/loss %.6f, val/ppl %.4f, val/bpb %.6f", cfg.ckpt_path, metrics["val/loss"],
                     metrics["val/ppl"], metrics["val/bpb"])
        if tasks:
            print(format_table({k: v for k, v in metrics.items() if not k.startswith("val/")}))
        written = Path(cfg.paths.output_dir).absolute() / "eval.json"
        atomic_write_text(written, json.dumps(metrics, indent=2) + "\n")
        log.info("wrote %s", written)
        print(json.dumps({"ckpt_path": str(cfg.ckpt_path), **metrics}))  # last: scripts read stdout's last line
    return metrics
