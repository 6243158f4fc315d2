"""eval.py's `contexts=[64,128,256]`: a checkpoint scored at several context lengths (gptlab.eval.extrapolation), or
every finished job of a sweep dir given as ckpt_path. What limits a context is refused by name before any scoring:
the learned position table's rows, the validation split's size, the memory of one window's attention scores."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import hydra
import lightning as L
import numpy as np
import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from gptlab.atomic import atomic_write_text
from gptlab.checkpoint.reader import (
    check_tokenizer_fits,
    check_tokenizer_matches,
    load_model,
    recorded_tokenizer,
    resolve_checkpoint,
    tokenizer_overrides,
)
from gptlab.errors import ConfigError, is_int
from gptlab.eval.context_results import RESULTS_FILE, read_results, results_record, write_results
from gptlab.eval.extrapolation import ContextScore, context_refusal, score_context, scored_span
from gptlab.model import GPT
from gptlab.model.sparse_attention import ATTENTION_KINDS
from gptlab.preflight.guards import free_bytes, resolve_accelerator
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE, SWEEP_CONFIG

log = logging.getLogger(__name__)
SCORE_BYTES = 4 * 2  # fp32 attention scores and their softmax, per (head, query, key) of one window


def check_contexts(value: Any) -> list[int]:
    """`contexts`: a list of distinct positive integers, scored shortest first."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"contexts={value!r} must be a list of context lengths, e.g. contexts=[64,128,256].")
    bad = [v for v in value if not is_int(v) or v < 1]
    if bad:
        raise ConfigError(f"contexts={list(value)!r} has {bad[0]!r}; give positive integers, e.g. contexts=[64,128].")
    if len(set(value)) != len(value):
        raise ConfigError(f"contexts={list(value)!r} repeats a length; give each once, e.g. "
                          f"contexts=[{','.join(str(v) for v in sorted(set(value)))}].")
    return sorted(int(v) for v in value)


def is_sweep_dir(path: Path) -> bool:
    """A `-m` sweep dir: the launch's sweep_config.json, or Hydra's multirun.yaml, at its root."""
    return path.is_dir() and ((path / SWEEP_CONFIG).is_file() or (path / "multirun.yaml").is_file())


@dataclass(frozen=True)
class Validation:
    tokens: np.ndarray
    eot_id: Optional[int]  # set: data.document_masking, as the datamodule's validation would do
    what: str  # the corpus, for messages


def validation_tokens(cfg: DictConfig, tokenizer: Any) -> Validation:
    """The validation split of data=..., whole: each context cuts its own windows from it."""
    datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
    tokens = getattr(datamodule.store, "tokens", "absent")
    if tokens == "absent":
        raise ConfigError(f"contexts=... cuts windows of each length from the validation split held whole, and "
                          f"data.store={cfg.data.store} (or a mixture) serves windows of one length only; use "
                          "data.store=memory or data.store=prepared with a single corpus.")
    datamodule.setup("validate")
    what = f"data.source {json.dumps(datamodule.store.source.describe())}"
    return Validation(datamodule.store.tokens["val"], datamodule.masking_eot, what)


def check_span(val: Validation, contexts: list[int], limit: Optional[int] = None) -> int:
    """The targets every context scores; a context longer than the split is refused naming the corpus and size.
    `limit` (context_targets): at most that many, the first of the split, still a multiple of every context."""
    n = len(val.tokens)
    longest = contexts[-1]
    if longest + 1 > n:
        raise ConfigError(f"contexts has {longest}, longer than the validation split of {val.what}: it holds {n} "
                          f"tokens, and a window of {longest} needs {longest + 1}. Give contexts of at most {n - 1}, "
                          "or a corpus with more validation text (a larger data.val_fraction, or another data=).")
    span = scored_span(n, contexts)
    if span == 0:
        raise ConfigError(f"contexts={contexts}: every context scores the same targets, a multiple of each length, "
                          f"and the validation split of {val.what} ({n} tokens) holds no common multiple of them; "
                          "give lengths that divide one another, e.g. powers of two.")
    if limit is not None:
        step = math.lcm(*contexts)
        if limit < step:
            raise ConfigError(f"context_targets={limit} is fewer than one window of every context ({step} targets, "
                              f"a multiple of each of {contexts}); give context_targets={step} or more, or null.")
        span = min(span, limit // step * step)
    return span


def memory_refusal(model: GPT, context: int, accelerator: str) -> Optional[str]:
    """Why one window of `context` tokens cannot be scored here: its attention scores (H x L x L) exceed memory."""
    need = model.config.n_head * context * context * SCORE_BYTES
    free = free_bytes(resolve_accelerator(accelerator))
    if need <= free:
        return None
    return (f"contexts has {context}: one window's attention scores take model.n_head x {context}^2 x {SCORE_BYTES} "
            f"bytes = {need / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free here; give shorter contexts.")


def refusals(model: GPT, contexts: list[int], accelerator: str) -> dict[int, str]:
    """{context: why it cannot be scored} for the model's position scheme and this machine's memory."""
    found = {c: context_refusal(model.config, c) or memory_refusal(model, c, accelerator) for c in contexts}
    return {c: why for c, why in found.items() if why}


def check_scorable(model: GPT, contexts: list[int], accelerator: str) -> None:
    """One checkpoint: every context it cannot be scored at is refused, by name, before anything is scored."""
    refused = refusals(model, contexts, accelerator)
    if refused:
        raise ConfigError(" ".join(refused.values()))


def note_limits(model: GPT, contexts: list[int], eot_id: Optional[int]) -> None:
    """What bounds a token's context besides the window, said once per checkpoint."""
    cfg = model.config
    if any(ATTENTION_KINDS[cfg.layer_kind(i)].cache_window for i in range(len(cfg.attn_pattern))) \
            and contexts[-1] > cfg.attn_window:
        log.info("local layers (model.attn_pattern=%s) see at most model.attn_window=%d keys at any context",
                 list(cfg.attn_pattern), cfg.attn_window)
    if eot_id is not None:
        log.info("data.document_masking=true: a token sees its own document only, whatever the context")


def score_model(model: GPT, val: Validation, contexts: list[int], span: int, cfg: DictConfig,
                trainer: L.Trainer) -> list[ContextScore]:
    """Each context scored with as many windows per forward as the training micro-batch had tokens."""
    tokens_per_batch = cfg.data.batch_size * model.config.block_size
    model.to(trainer.strategy.root_device)
    scores = []
    for context in contexts:
        scores.append(score_context(model, val.tokens, context, span, max(1, tokens_per_batch // context),
                                    trainer.strategy.root_device, val.eot_id,
                                    trainer.precision_plugin.forward_context))
        log.info("context %d: loss %.6f over %d windows (%d targets)", context, scores[-1].loss, scores[-1].windows,
                 scores[-1].tokens)
    return scores


def context_metrics(scores: list[ContextScore]) -> dict[str, float]:
    """eval.json's keys: contexts/<L>/loss (token mean, nats) and contexts/<L>/ppl."""
    return {k: v for s in scores for k, v in ((f"contexts/{s.context}/loss", s.loss),
                                               (f"contexts/{s.context}/ppl", s.ppl))}


def evaluate_checkpoint(model: GPT, cfg: DictConfig, tokenizer: Any, contexts: list[int],
                        trainer: L.Trainer) -> dict[str, float]:
    """One checkpoint's loss at each context: context_eval.json, the loss by position (CSV, PNG) in eval's run dir,
    and eval.json's keys."""
    check_scorable(model, contexts, cfg.trainer.accelerator)
    val = validation_tokens(cfg, tokenizer)
    span = check_span(val, contexts, cfg.context_targets)
    note_limits(model, contexts, val.eot_id)
    scores = score_model(model, val, contexts, span, cfg, trainer)
    if trainer.is_global_zero:
        scored = {"checkpoint": str(cfg.ckpt_path), "data": val.what, "contexts": contexts, "scored_targets": span}
        record = results_record(scored, model.config.pos_emb, model.config.block_size, scores, {})
        for path in write_results(Path(cfg.paths.output_dir).absolute(), record, scores, str(cfg.ckpt_path)):
            log.info("wrote %s", path)
    return context_metrics(scores)


def _job_problem(job_dir: Path) -> Optional[str]:
    """Why a sweep's job is not scored (None: it is)."""
    if (job_dir / FAILURE_FILE).exists():
        return f"it failed ({FAILURE_FILE})"
    if not (job_dir / SUMMARY_FILE).exists():
        return f"not finished (no {SUMMARY_FILE}): still running, or killed"
    return None


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's job dirs (those with Hydra's .hydra/), in job order (2 before 10)."""
    dirs = (p for p in sweep_dir.iterdir() if p.is_dir() and (p / ".hydra").is_dir())
    return sorted(dirs, key=lambda p: (len(p.name), p.name))


def job_title(job_dir: Path) -> str:
    """`job 3: model.pos_emb=rope, seed=2`: the job's variant as its overrides name it (the dir name alone is a
    number)."""
    try:
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
        swept = set(json.loads((job_dir.parent / SWEEP_CONFIG).read_text()).get("swept") or {})
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        overrides, swept = [], set()
    shown = ", ".join(o for o in overrides if isinstance(o, str) and o.split("=", 1)[0] in swept)
    return f"job {job_dir.name}: {shown}" if shown else f"job {job_dir.name}"


def score_job(job_dir: Path, cfg: DictConfig, tokenizer: Any, val: Validation, contexts: list[int], span: int,
              trainer: L.Trainer) -> dict[str, Any]:
    """One job's checkpoint at every context its scheme allows (the others recorded with the reason); its results
    go into its own dir. A job already scored (same checkpoint, data and contexts) keeps its results: a sweep
    scored again while more of its jobs finish scores only the new ones."""
    checkpoint = resolve_checkpoint(job_dir)
    scored = {"checkpoint": str(checkpoint), "checkpoint_mtime_ns": checkpoint.stat().st_mtime_ns,
              "data": val.what, "contexts": contexts, "scored_targets": span}
    previous = job_dir / RESULTS_FILE
    if previous.is_file():
        try:
            record = read_results(previous)
        except ValueError:
            record = {}
        if record.get("scored") == scored:
            log.info("job %s: already scored at contexts %s (%s): kept", job_dir.name, contexts, previous)
            return record
    model, hparams = load_model(checkpoint)
    trained = recorded_tokenizer(hparams)
    if trained is not None:
        check_tokenizer_matches(trained, OmegaConf.to_container(cfg.tokenizer, resolve=True),
                                f"score this job alone: ckpt_path={job_dir} {tokenizer_overrides(trained)}")
    check_tokenizer_fits(tokenizer, model, "tokenizer")
    refused = refusals(model, contexts, cfg.trainer.accelerator)
    allowed = [c for c in contexts if c not in refused]
    note_limits(model, allowed or contexts, val.eot_id)
    scores = score_model(model, val, allowed, span, cfg, trainer)
    record = results_record(scored, model.config.pos_emb, model.config.block_size, scores, refused)
    write_results(job_dir, record, scores, job_title(job_dir))
    for context, why in refused.items():
        log.info("job %s, context %d refused: %s", job_dir.name, context, why)
    return record


VAL_LOSS_FROM = (f"each job's {SUMMARY_FILE} (final_val_loss: its run's own validation at its trained context, on "
                 "the run's validation batches); the loss at each context is in jobs/<job>/contexts")


def _read_summary(job_dir: Path) -> dict[str, Any]:
    try:
        found = json.loads((job_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def evaluate_sweep(cfg: DictConfig, tokenizer: Any, contexts: list[int], trainer: L.Trainer) -> dict[str, Any]:
    """Every finished job of the sweep dir `ckpt_path`: each job's context_eval.json (and the CSV and PNG of its loss
    by position) in its own dir, where `scripts/ablation_report.py --context L` reads them; eval's run dir gets the
    summary of all jobs, those skipped with the reason."""
    sweep_dir = Path(cfg.ckpt_path)
    with open_dict(cfg):
        cfg.data.block_size = contexts[0]  # the datamodule's own windows go unused: each context cuts its own
    val = validation_tokens(cfg, tokenizer)
    span = check_span(val, contexts, cfg.context_targets)
    jobs, skipped = {}, {}
    for job_dir in job_dirs(sweep_dir):
        problem = _job_problem(job_dir)
        if problem is None:
            try:
                jobs[job_dir.name] = score_job(job_dir, cfg, tokenizer, val, contexts, span, trainer)
                continue
            except ConfigError as err:  # this job's checkpoint or tokenizer: the others are still scored
                problem = str(err)
        skipped[job_dir.name] = problem
        log.warning("skipping job %s: %s", job_dir.name, problem)
    if not jobs:
        raise ConfigError(f"ckpt_path={str(sweep_dir)!r} is a sweep dir without a job that could be scored: "
                          + "; ".join(f"{k}: {v}" for k, v in skipped.items()) + ". Give a sweep dir whose jobs "
                          "finished, or one job's run dir.")
    val_loss = {name: _read_summary(sweep_dir / name).get("final_val_loss") for name in jobs}
    summary = {"sweep_dir": str(sweep_dir), "val/loss": val_loss, "val/loss_from": VAL_LOSS_FROM, "jobs": jobs,
               "skipped": skipped}
    written = Path(cfg.paths.output_dir).absolute() / "eval.json"
    atomic_write_text(written, json.dumps(summary, indent=2) + "\n")
    log.info("wrote %s and each job's context_eval.json", written)
    return summary
