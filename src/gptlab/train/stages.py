"""The speedrun's schedules over training (`stages.*`, model.untie_at), each a function of the optimizer step alone.

A schedule is a list of values for equal stages of trainer.max_steps: stage k of n holds for steps s with
floor(n s / max_steps) = k, as modded-nanogpt splits its run into thirds. Because every value is a function of the
step (and the data loader is untouched: it yields the same windows whatever the stage), a resumed run lands in the
same stage with the same values, bit for bit, on either side of a boundary. What each schedule does to a step:

- windows (record 13, 2024-11-24: window warmup; record 29, 2025-09-03: in stages): local layers see w_k keys, short
  layers w_k // 2; validation and evaluation use model.attn_window, so val/loss is comparable across stages;
- seq_lens (record 72, 2026-02-10): each (B, T) micro-batch is cut into (B T / t_k, t_k) sequences: the same tokens
  per step, shorter contexts;
- batch_sizes (record 46, 2025-11-29): the first b_k rows of each micro-batch are trained on (the others are skipped:
  the data position stays the loader's), and the lr is times (b_k / b_0)^p, p = stages.batch_lr_exponent;
- model.untie_at (record 53, 2025-12-22): at step round(f max_steps) the tied head gets its own parameter
  (GPT.untie_head), the optimizer's groups are those a fresh build of the untied model would have, and the new
  parameter starts from the tied one's optimizer state.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from gptlab.config.schemas import Stages
from gptlab.model import GPT

T = TypeVar("T")


def stage_value(values: Sequence[T], step: int, total_steps: int) -> T:
    """The value of the stage `step` falls in: the list splits total_steps into len(values) equal stages."""
    return values[min(len(values) - 1, len(values) * step // max(1, total_steps))]


@dataclass(frozen=True)
class StagePlan:
    """A run's schedules, for its trainer.max_steps."""

    stages: Stages
    total_steps: int
    untie_at: Optional[float] = None

    @property
    def untie_step(self) -> Optional[int]:
        return None if self.untie_at is None else round(self.untie_at * self.total_steps)

    def window(self, step: int) -> Optional[int]:
        windows = self.stages.windows
        return stage_value(windows, step, self.total_steps) if windows else None

    def batch(self, batch: tuple[torch.Tensor, ...], step: int) -> tuple[torch.Tensor, ...]:
        """The micro-batch this step trains on: its stage's rows, cut into its stage's sequence length. Inputs,
        targets and document ids alike (each row's targets are its inputs shifted by one, so a cut keeps them
        aligned; document ids stay nondecreasing along each cut)."""
        rows = stage_value(self.stages.batch_sizes, step, self.total_steps) if self.stages.batch_sizes else None
        length = stage_value(self.stages.seq_lens, step, self.total_steps) if self.stages.seq_lens else None
        if rows is None and length is None:
            return batch
        return tuple(t[:rows].reshape(-1, length or t.shape[1]) for t in batch)

    def tokens_through(self, step: int, tokens_per_step: int, batch_size: int) -> int:
        """Tokens trained in optimizer steps 0 .. step-1: the loader's tokens_per_step each, times b_k / batch_size
        under stages.batch_sizes (the skipped rows are not trained on; seq_lens keeps a step's tokens). What
        run_summary.json's tokens_seen, x_throughput/tokens_seen and the reports' token axes count."""
        sizes = self.stages.batch_sizes
        if not sizes:
            return step * tokens_per_step
        n, total, tokens = len(sizes), max(1, self.total_steps), 0
        for k, rows in enumerate(sizes):  # stage k: the steps s with floor(n s / total) = k (stage_value), the last
            start = -(-k * total // n)     # stage also every step past total; counted per stage, not per step, as
            end = step if k == n - 1 else min(step, -(-(k + 1) * total // n))  # TokenThroughput asks at every log
            tokens += max(0, end - start) * (tokens_per_step * min(rows, batch_size) // batch_size)
        return tokens

    def lr_factor(self, step: int) -> float:
        """(b_k / b_0)^p for stages.batch_sizes; 1 without them."""
        sizes = self.stages.batch_sizes
        if not sizes:
            return 1.0
        return (stage_value(sizes, step, self.total_steps) / sizes[0]) ** self.stages.batch_lr_exponent

    def scale_lr(self, scheduler: Optional[LambdaLR], optimizer: Optimizer) -> Optional[LambdaLR]:
        """The lr schedule times lr_factor: each LambdaLR factor multiplied, or a LambdaLR of lr_factor alone for a run
        without a schedule. The factor is 1 at step 0, where LambdaLR set the lrs; a LambdaLR's state is its step
        count (plain functions are not saved), so a resumed run recomputes the same lrs."""
        if not self.stages.batch_sizes:
            return scheduler
        if scheduler is None:
            return LambdaLR(optimizer, _times(lambda step: 1.0, self.lr_factor))
        scheduler.lr_lambdas = [_times(f, self.lr_factor) for f in scheduler.lr_lambdas]
        return scheduler

    def start_step(self, model: GPT, step: int, optimizer: Optimizer, regroup: Callable[[], list[dict]]) -> None:
        """Before a training step: untie the head at its step (with the optimizer, and `regroup`: the optimizer's
        groups of the model, as its factory builds them), and set the stage's window."""
        untie_step = self.untie_step
        if untie_step is not None and step >= untie_step and model.head_tied:
            new = model.untie_head()
            untie(model, new, optimizer, regroup())
        window = self.window(step)
        if window is not None:
            model.use_window(window)


def _times(factor: Callable[[int], float], extra: Callable[[int], float]) -> Callable[[int], float]:
    def scaled(step: int) -> float:
        return factor(step) * extra(step)

    return scaled


def untie(model: GPT, new: torch.nn.Parameter, optimizer: Optimizer, groups: list[dict]) -> None:
    """model.untie_at's step, after GPT.untie_head made `new` the token embedding: each optimizer group's parameters
    become those of `groups` (the optimizer's param_groups function run on the untied model: the same groups, in the
    same order, that a run resumed after this step builds); the new parameter's optimizer state is a copy of the tied
    one's, which the head keeps (record 53 copies its head's Adam state to the embedding)."""
    tied = model.head.weight
    if [g.get("name") for g in groups] != [g.get("name") for g in optimizer.param_groups]:
        raise RuntimeError("model.untie_at: the untied model's parameter groups do not match the optimizer's; "
                           "build the optimizer with gptlab.train.optim.param_groups")
    for group, fresh in zip(optimizer.param_groups, groups):
        group["params"] = list(fresh["params"])
    parts = getattr(optimizer, "parts", (optimizer,))  # MuonAdamW and NorMuonAdam: each inner optimizer's state
    owner = next((p for p in parts if tied in p.state), None)
    holder = next(p for p in parts if any(new is q for g in p.param_groups for q in g["params"]))
    if owner is not None:
        holder.state[new] = {k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                             for k, v in owner.state[tied].items()}


def tokens_trained(cfg: Any, step: int, tokens_per_step: int, total_steps: int) -> int:
    """StagePlan.tokens_through for a run's resolved config (a mapping: config_resolved.yaml or the DictConfig)."""
    stages = (cfg.get("stages") or {}).get("batch_sizes")
    if not stages:
        return step * tokens_per_step
    plan = StagePlan(Stages(batch_sizes=list(stages)), total_steps)
    return plan.tokens_through(step, tokens_per_step, int(cfg["data"]["batch_size"]))
