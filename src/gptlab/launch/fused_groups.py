"""Which jobs of a `-m` sweep can train as one fused group (hydra/launcher=fused, execution/fused.py): those whose
fused step is the same computation at every step. The decision is derived from the whole resolved config: two jobs
share a group only if they are equal in every key but those of MEMBER_OWN, the keys whose value the fused step takes
from each member itself (its loss terms, dropout, optimizer, schedule, data, callbacks...), so a key added later
splits the sweep until it is shown to be a member's own (tests/test_fused.py walks every key). STEP_KEYED are own
too, except in a run with a schedule over its steps (stages.*, model.untie_at): they place a fused round's steps, and
members whose stages fall on other rounds cannot share them. What cannot fuse at all is refused here, before any
job runs; gptlab.execution.fused checks each round's members once more and never fuses members that differ."""

from __future__ import annotations

import json
from typing import Any, Optional

import hydra
from omegaconf import DictConfig, OmegaConf

from gptlab.config import budget
from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.preflight import guards
from gptlab.preflight.batch_fit import MEMORY_MARGIN
from gptlab.preflight.early_checks import build_model_config
from gptlab.preflight.planning import GB, PROCESS_OVERHEAD_BYTES, estimate_memory
from gptlab.runs.flat_config import flatten

WAY_OUT = "or run the sweep without hydra/launcher=fused"
# Each member's own, as flat keys or key prefixes (ending in "."): its loss applies its own label smoothing, z-loss
# and multi-token weights and its dropout its own rate (execution/fused.py), the init keys act only when the member
# builds its model; its optimizer, schedule, clipping, data, callbacks, logger and run dir are its own run's
# (everything outside the fused forward and backward runs in the member's own thread, on its turn).
MEMBER_OWN = (
    "name", "seed", "paired_seeds", "label_smoothing", "nonfinite_check_every", "print_config", "check_memory",
    "model.z_loss", "model.dropout", "model.init_scale", "model.zero_init_proj", "model.mtp_weights",
    "model.mtp_weights_end", "optimizer.", "scheduler.", "stages.batch_lr_exponent", "callbacks.", "logger.", "paths.",
    "data.source.", "data.store", "data.cache_dir", "data.val_fraction", "data.sampling", "data.shard_tokens",
    "data.num_proc", "data.verify_sha256", "data.val_windows", "data.num_workers", "data.seed",
    "trainer.default_root_dir", "trainer.gradient_clip_val", "trainer.val_check_interval",
    "trainer.check_val_every_n_epoch", "trainer.limit_val_batches", "trainer.num_sanity_val_steps",
    "trainer.log_every_n_steps", "trainer.enable_model_summary",
)
# Own in a run without schedules over its steps; in one with them (SCHEDULES), they decide which of its steps (and
# so which stage) each micro-batch a member hands to a fused round belongs to, and a resumed member's first step.
STEP_KEYED = ("trainer.max_steps", "trainer.max_epochs", "trainer.accumulate_grad_batches", "global_batch_tokens",
              "ladder_tokens_per_param", "data.samples_per_epoch", "ckpt_path", "resume")
SCHEDULES = ("stages.windows", "stages.seq_lens", "stages.batch_sizes", "model.untie_at")
# Each member's stacked parameters for the fused step, and their gradient (fp32), on top of what a run alone holds
# (preflight/planning.py's states and activations); all members' activations are alive at once.
STACKED_BYTES_PER_PARAM = 8


def _matches(key: str, names: tuple[str, ...]) -> bool:
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in names)


def flat_config(cfg: DictConfig) -> dict[str, Any]:
    """The job's config as flat keys, unresolved (a member's own paths resolve only in its run), Hydra's own node
    left out (its job number and dirs differ by job)."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    plain.pop("hydra", None)
    return dict(flatten(plain))


def shared_keys(flat: dict[str, Any]) -> list[str]:
    """The keys of a job's flat config that every member of its group must share (all but the member's own)."""
    scheduled = any(flat.get(k, "None") not in ("None", "[]") for k in SCHEDULES)
    own = MEMBER_OWN if scheduled else MEMBER_OWN + STEP_KEYED
    return [k for k in flat if not _matches(k, own)]


def shape_key(cfg: DictConfig) -> dict[str, Any]:
    """The settings, resolved, that must be equal between the members of one group."""
    values = {k: OmegaConf.select(cfg, k, throw_on_missing=False) for k in shared_keys(flat_config(cfg))}
    plain = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in values.items()}
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in plain.items()}


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
    bound = budget.of(cfg)
    if bound is not None and bound.kind == "seconds":
        raise ConfigError(f"hydra/launcher=fused trains a group's members in turns on one device, so a member's "
                          f"seconds are not its own run's (job {job} has budget={cfg.budget}); give a tokens or "
                          f"flops budget (e.g. budget=tokens:2e6), {WAY_OUT}.")
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
    differ = sorted({k for s in shapes for k in s if any(k in o and o[k] != s[k] for o in shapes)})
    return groups, differ


def describe(groups: list[list[int]], differ: list[str], configs: list[DictConfig], max_members: int) -> list[str]:
    """What the launcher prints at start: each group's members and why the sweep was split."""
    shapes = "one shape" if not differ else f"split by {', '.join(differ)} (members of a group share them)"
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
