"""Which jobs of a `-m` sweep can train as one fused group (hydra/launcher=fused, execution/fused.py): those whose
fused forward is the same computation, i.e. the same model (z_loss aside: each member's loss is its own), tokenizer,
micro-batch shape, precision and runtime. Everything else (seed, optimizer and schedule values, clipping, label
smoothing, max_steps, ...) is each member's own. What cannot fuse at all is refused here, before any job runs."""

from __future__ import annotations

import json
from typing import Any, Optional

import hydra
from omegaconf import DictConfig, OmegaConf

from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.preflight import guards
from gptlab.preflight.batch_fit import MEMORY_MARGIN
from gptlab.preflight.early_checks import build_model_config
from gptlab.preflight.planning import GB, PROCESS_OVERHEAD_BYTES, estimate_memory
from gptlab.runs.flat_config import flatten

WAY_OUT = "or run the sweep without hydra/launcher=fused"
# In the model node but each member's own: its loss applies its own z_loss, its dropout its own rate
# (execution/fused.py), and the init keys act only when the member builds its model, before any fused step.
MEMBER_OWN = {"model.z_loss", "model.dropout", "model.init_scale", "model.zero_init_proj"}
# The fused step's own copy of each member's parameters, stacked, and that copy's gradient (fp32), on top of what a
# run alone holds (preflight/planning.py's states and activations); all members' activations are alive at once.
STACKED_BYTES_PER_PARAM = 8


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
    strategy = str(trainer.get("strategy") or "auto")
    if strategy != "auto":  # DDP or FSDP: ranks of their own, where a member is one thread of this process
        raise ConfigError(f"hydra/launcher=fused runs each member as a thread of one process on one device, not under "
                          f"a strategy of several (job {job} has trainer.strategy={strategy}); use trainer=default, "
                          f"{WAY_OUT}.")
    for key in ("devices", "num_nodes"):
        if trainer.get(key) not in (1, None):
            raise ConfigError(f"hydra/launcher=fused runs a group's members in one process on one device, but job "
                              f"{job} has trainer.{key}={trainer.get(key)}; set trainer.{key}=1, {WAY_OUT}.")
    runtime = Runtime(**cfg.get("runtime", {}))
    eager = {"runtime.compile": (runtime.compile, "false"), "runtime.float8": (runtime.float8, "false"),
             "runtime.activation_checkpointing": (runtime.checkpointing(sharded=False) != "none", "false")}
    for key, (on, off) in eager.items():  # each swaps the model's code for its own, which vmap cannot run
        if on:
            raise ConfigError(f"hydra/launcher=fused runs its fused step as the plain model's eager code, under "
                              f"torch.func.vmap (job {job} has {key}={OmegaConf.select(cfg, key)}); set {key}={off}, "
                              f"{WAY_OUT}.")


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


def group_bytes(cfg: DictConfig, members: int) -> tuple[float, float]:
    """(bytes of a group of `members` members of `cfg`'s shape, bytes of one member): one process's runtime, then
    each member's weights, gradients, optimizer states and activations as train's memory check counts them for
    its run alone (preflight/planning.py, the one estimate), and the fused step's stacked copy."""
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model_cfg = build_model_config(cfg.model, tokenizer.vocab_size)
    runtime = Runtime(**cfg.get("runtime", {}))
    est = estimate_memory(model_cfg, cfg.data.batch_size, cfg.trainer,
                          guards.resolve_accelerator(cfg.trainer.get("accelerator", "auto")), runtime)
    member = est.per_process - PROCESS_OVERHEAD_BYTES + STACKED_BYTES_PER_PARAM * est.parameters
    return PROCESS_OVERHEAD_BYTES + members * member, member


def check_group_memory(group: list[DictConfig], free: Optional[float] = None) -> None:
    """Refuse a group whose members cannot all fit in one device's free memory (free RAM on a CPU), naming the
    group size that fits with MEMORY_MARGIN to spare (as a run's own refusal does: free memory moves between the
    refusal and the launch it suggests); check_memory=false in every member skips it, as it skips a run's own check."""
    if not any(member.get("check_memory", True) for member in group):
        return
    for cfg in group:  # one shape: the first member whose own values build gives every member's bytes
        try:
            need, member = group_bytes(cfg, len(group))
            break
        except ConfigError:
            continue  # refused for its own values: its run records that, as in any sweep
    else:
        return  # every member is refused on its own, before it allocates anything
    accelerator = guards.resolve_accelerator(cfg.trainer.get("accelerator", "auto"))
    free = guards.free_bytes(accelerator) if free is None else free
    if need <= free:
        return
    where = "free RAM" if accelerator == "cpu" else "free memory on GPU 0"
    fits = int((free * (1 - MEMORY_MARGIN) - PROCESS_OVERHEAD_BYTES) // member)
    said = (f"hydra/launcher=fused: a group of {len(group)} members (jobs {_ids(group)}) needs about {need / GB:,.1f} "
            f"GB but {where} is {free / GB:,.1f} GB: {len(group)} x {member / GB:,.2f} GB (each member's weights, "
            f"gradients, optimizer states and activations, and the fused step's stacked copy of its weights) + "
            f"runtime {PROCESS_OVERHEAD_BYTES / GB:.1f} GB")
    if fits >= 1:
        raise ConfigError(f"{said}; set hydra.launcher.max_members={fits} (groups of {fits} run one after "
                          f"another, leaving {MEMORY_MARGIN:.0%} of the {where} spare), {WAY_OUT}. "
                          f"{guards.SKIP_CHECK}")
    raise ConfigError(f"{said}; not even one member fits: {WAY_OUT[3:]}, whose memory check says what makes one "
                      f"run fit. {guards.SKIP_CHECK}")


def _ids(group: list[DictConfig]) -> str:
    return ",".join(f"#{cfg.hydra.job.num}" for cfg in group)
