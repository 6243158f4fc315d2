"""Whether a run was stable, as a result the reports show beside its loss (issue: a run whose loss rose above its
starting point and then settled is not a healthy run, even if it ends finite).

Definitions (stated on every report, docs/verdicts.md#stability):
- diverged: the run stopped on a NaN/inf loss, or logged one;
- unstable: a logged train/loss rose more than RISE_FRACTION above the run's initial loss (its first logged
  train/loss, measured, not ln(vocabulary)), or jumped more than SPIKE_NATS above the lowest train/loss logged
  before it (a spike); when the first logged loss comes after the first step, a first loss above ln(vocabulary)
  (the uniform prediction an initialised model makes) counts as a rise too;
- stable: neither; unknown: no train/loss was logged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RISE_FRACTION = 0.01  # the loss at init barely moves batch to batch (near-uniform predictions): 1% is a real rise
SPIKE_NATS = 1.0  # far above batch noise at any point of training (train/loss of a step varies by ~0.1 nats here)

_NATS = f"{SPIKE_NATS:g} nat" + ("" if SPIKE_NATS == 1 else "s")
DEFINITIONS = (
    f"Stability (gptlab.report.instability): **diverged** = the run stopped on a NaN/inf loss or logged one; "
    f"**unstable** = a logged train/loss rose more than {RISE_FRACTION:.0%} above the run's initial loss (its first "
    f"logged train/loss, measured), or jumped more than {_NATS} above the lowest train/loss logged "
    f"before it (a spike), even if it recovered later; **stable** = neither."
)


@dataclass(frozen=True)
class Stability:
    kind: str  # "stable" | "unstable" | "diverged" | "unknown"
    detail: str  # why, with the step: what the report prints beside the kind
    initial: float | None = None  # the first logged train/loss
    initial_step: int | None = None  # the optimizer steps done when it was logged (1: the untrained model's loss)

    @property
    def at_init(self) -> bool:
        """Whether the initial loss is the untrained model's (logged at the first step)."""
        return self.initial_step is not None and self.initial_step <= 1

    def label(self) -> str:
        return self.kind if not self.detail else f"{self.kind} ({self.detail})"


def classify(train_loss: Sequence[tuple[int, float]], diverged: str | None = None,
             uniform_loss: float | None = None) -> Stability:
    """The stability of one run from its logged (step, train/loss) points; `diverged` is the reason a run
    stopped on a non-finite loss (its summary or failure record says so), `uniform_loss` ln(vocabulary)."""
    first = train_loss[0] if train_loss else (None, None)
    initial_step, initial = first
    if diverged:
        return Stability("diverged", diverged.splitlines()[0][:120], initial, initial_step)
    bad = next(((s, v) for s, v in train_loss if not math.isfinite(v)), None)
    if bad is not None:
        return Stability("diverged", f"train/loss {bad[1]} at step {bad[0]}", initial, initial_step)
    if not train_loss:
        return Stability("unknown", "no train/loss logged")
    if initial_step > 1 and uniform_loss is not None and initial > uniform_loss * (1 + RISE_FRACTION):
        return Stability("unstable", f"first logged train/loss {initial:.2f} at step {initial_step} is above "
                         f"ln(vocabulary) = {uniform_loss:.2f}", initial, initial_step)
    lowest = initial
    for step, loss in train_loss[1:]:
        if loss > initial * (1 + RISE_FRACTION):
            return Stability("unstable", f"train/loss {loss:.2f} at step {step} > initial {initial:.2f}", initial,
                             initial_step)
        if loss - lowest > SPIKE_NATS:
            return Stability("unstable", f"train/loss spiked to {loss:.2f} at step {step}, +{loss - lowest:.2f} "
                             f"nats above its lowest before", initial, initial_step)
        lowest = min(lowest, loss)
    return Stability("stable", "", initial, initial_step)
