"""A continued run trains with the optimizer settings it was given. Lightning restores the optimizer's param groups
(lr, betas, weight_decay, eps) and the schedule's base lrs from the checkpoint over those the run's config built, so
`resume=auto optimizer.lr=1e-2` on a run trained at 4e-3 trained on at 4e-3 while config_resolved.yaml said 0.01.
The groups the config built are kept before the restore and put back after it (the moments and the step counts stay
the checkpoint's); each optimizer.* and scheduler.* value that changed is logged with the step it applies from."""

from __future__ import annotations

import logging
from typing import Any, Optional

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from gptlab.lightning_internals import set_last_lr

log = logging.getLogger(__name__)


def built_settings(optimizer: Optimizer) -> list[dict[str, Any]]:
    """Each param group's settings as the config built them (its lr before any schedule), without the parameters."""
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def _same(a: Any, b: Any) -> bool:
    """Equal settings; betas come back from a checkpoint as a list or a tuple alike."""
    return list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b


def reapply(optimizer: Optimizer, scheduler: Optional[LRScheduler], built: list[dict[str, Any]]) -> bool:
    """Put the config's settings back over the restored ones; True when any differed. The lr is the schedule's base:
    each group's current lr becomes the new base times the schedule's factor at the restored step."""
    changed = False
    for group, fresh in zip(optimizer.param_groups, built):
        for key, value in fresh.items():
            if key not in ("lr", "initial_lr") and not _same(group.get(key), value):
                group[key], changed = value, True
    bases = [fresh["lr"] for fresh in built]
    if scheduler is None:
        for group, base in zip(optimizer.param_groups, bases):
            if group["lr"] != base:
                group["lr"], changed = base, True
        return changed
    if list(scheduler.base_lrs) == bases:
        return changed
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if lambdas is not None:  # every gptlab schedule: the lr is base x factor(step), recomputed exactly
        lrs = [base * factor(scheduler.last_epoch) for base, factor in zip(bases, lambdas)]
    else:  # another torch schedule: its lr scales with its base
        lrs = [group["lr"] * base / old for group, base, old in zip(optimizer.param_groups, bases,
                                                                    scheduler.base_lrs)]
    for group, base, lr in zip(optimizer.param_groups, bases, lrs):
        group["initial_lr"], group["lr"] = base, lr
    scheduler.base_lrs = bases
    set_last_lr(scheduler, lrs)
    return True


def changed_values(trained: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """`optimizer.lr: 0.004 -> 0.01` for each optimizer.* and scheduler.* value of the run config (hparams' `run`)
    that differs from the checkpoint's record of it."""
    lines = []
    for node in ("optimizer", "scheduler"):
        old, new = trained.get(node) or {}, wanted.get(node) or {}
        for key in sorted(set(old) | set(new)):
            if key != "_partial_" and old.get(key) != new.get(key):
                lines.append(f"{node}.{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return lines


def log_changes(trained: Optional[dict[str, Any]], wanted: Optional[dict[str, Any]], step: int) -> None:
    """Say which recorded settings this continued run changes, so train.log shows where its lr (or decay) moved."""
    lines = changed_values(trained or {}, wanted or {})
    if lines:
        log.info("Continuing from step %d with settings the checkpoint did not have, applied from this step on: %s",
                 step, "; ".join(lines))
