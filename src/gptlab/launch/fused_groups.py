"""Which jobs of a `-m` sweep can train as one fused group (hydra/launcher=fused, execution/fused.py): those whose
fused forward is the same computation, i.e. the same model (z_loss aside: each member's loss is its own), tokenizer,
micro-batch shape, precision and runtime. Everything else (seed, optimizer and schedule values, clipping, label
smoothing, max_steps, ...) is each member's own. What cannot fuse at all is refused here, before any job runs."""

from __future__ import annotations

import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gptlab.errors import ConfigError
from gptlab.runs.flat_config import flatten

WAY_OUT = "or run the sweep without hydra/launcher=fused"
MEMBER_OWN = {"model.z_loss"}  # in a shape node, but each member's loss applies its own


def shape_key(cfg: DictConfig) -> dict[str, Any]:
    """The flat settings that must be equal between the members of one group."""
    nodes = {
        "model": cfg.model,
        "tokenizer": cfg.get("tokenizer"),
        "data": {k: cfg.data.get(k) for k in ("batch_size", "block_size", "document_masking")},
        "trainer": {k: cfg.trainer.get(k) for k in ("precision", "accelerator")},
        "runtime": cfg.get("runtime"),
    }
    plain = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in nodes.items()}
    return {k: v for k, v in flatten(plain) if k not in MEMBER_OWN}


def check_fusable(cfg: DictConfig, job: str) -> None:
    """One line naming the key of `job` (its overrides) that no fused group can take, and the way out."""
    trainer = cfg.trainer
    if "fsdp" in str(trainer.get("strategy", "")).lower():
        raise ConfigError(f"hydra/launcher=fused cannot shard members (job {job} has trainer.strategy="
                          f"{trainer.get('strategy')}); drop trainer.strategy (trainer=default), {WAY_OUT}.")
    for key in ("devices", "num_nodes"):
        if trainer.get(key) not in (1, None):
            raise ConfigError(f"hydra/launcher=fused runs a group's members in one process on one device, but job "
                              f"{job} has trainer.{key}={trainer.get(key)}; set trainer.{key}=1, {WAY_OUT}.")
    if float(cfg.model.get("dropout") or 0.0) > 0.0:
        raise ConfigError(f"hydra/launcher=fused members would draw their dropout masks from one random stream, so "
                          f"none would repeat its own run (job {job} has model.dropout={cfg.model.dropout}); set "
                          f"model.dropout=0, {WAY_OUT}.")
    if OmegaConf.select(cfg, "runtime.compile") is True:
        raise ConfigError(f"hydra/launcher=fused runs its fused step eager (job {job} has runtime.compile=true); set "
                          f"runtime.compile=false, {WAY_OUT}.")


def plan_groups(configs: list[DictConfig], max_members: int) -> tuple[list[list[int]], list[str]]:
    """The jobs (indices into `configs`) of each group, in sweep order, at most `max_members` each, and the
    settings that split the sweep into shapes (empty: one shape)."""
    if not isinstance(max_members, int) or isinstance(max_members, bool) or max_members < 1:
        raise ConfigError(f"hydra.launcher.max_members={max_members!r} must be a positive number of members per "
                          "group, e.g. hydra.launcher.max_members=8.")
    keys: dict[str, list[int]] = {}
    flat: dict[str, dict[str, Any]] = {}
    for i, cfg in enumerate(configs):
        check_fusable(cfg, f"#{cfg.hydra.job.num} ({' '.join(cfg.hydra.overrides.task) or 'no overrides'})")
        key = shape_key(cfg)
        text = json.dumps(key, sort_keys=True, default=str)
        keys.setdefault(text, []).append(i)
        flat[text] = key
    groups = [jobs[start:start + max_members] for jobs in keys.values() for start in range(0, len(jobs), max_members)]
    shapes = list(flat.values())
    differ = sorted({k for s in shapes for k in s if any(o.get(k) != s.get(k) for o in shapes)})
    return groups, differ


def describe(groups: list[list[int]], differ: list[str], configs: list[DictConfig], max_members: int) -> list[str]:
    """What the launcher prints at start: each group's members and why the sweep was split."""
    shapes = "one model shape" if not differ else f"model shapes that differ in {', '.join(differ)}"
    lines = [f"gptlab: fused: {len(configs)} jobs in {len(groups)} group(s) of at most {max_members} members "
             f"(hydra.launcher.max_members); {shapes}"]
    for n, group in enumerate(groups, start=1):
        names = " | ".join(str(configs[i].hydra.job.override_dirname) or "-" for i in group)
        ids = ",".join(f"#{configs[i].hydra.job.num}" for i in group)
        lines.append(f"gptlab: fused: group {n}: {len(group)} members, jobs {ids}: {names}")
    return lines
