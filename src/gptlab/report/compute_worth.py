"""What a loss difference is worth in training compute at the sweep's scale: the baseline's own mean val/loss curve
against training FLOPs, read at the variant's final loss. m = C_b / C_v, where the baseline reached the variant's
loss after C_b FLOPs and the variant spent C_v: m > 1, the variant saves compute (1.3x: the baseline needs 30% more
to match it). The curve is read between its validation points, loss linear in log FLOPs, after a running minimum
(a noisy uptick must not give one loss two costs); a loss the curve never reached, or above its first point, is
"beyond the curve": no extrapolation. The interval reads the curve at the ends of the loss difference's interval;
the noise of the baseline's curve itself is not in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BEYOND = "beyond the curve"


def flops_at_loss(flops: Sequence[float], loss: Sequence[float], target: float) -> float | None:
    """The FLOPs at which the curve first reached `target`; None outside the losses it spans."""
    x, y = np.asarray(flops, dtype=float), np.minimum.accumulate(np.asarray(loss, dtype=float))
    if len(x) < 2 or target < y[-1] or target > y[0]:
        return None
    i = int(np.argmax(y <= target))  # first point at or below the target
    if i == 0:
        return float(x[0])
    lo, hi = y[i - 1], y[i]
    frac = (lo - target) / (lo - hi)
    return float(np.exp(np.log(x[i - 1]) + frac * (np.log(x[i]) - np.log(x[i - 1]))))


@dataclass(frozen=True)
class Worth:
    multiplier: float | None  # None: beyond the curve
    low: float | None  # from the loss interval's upper end (a higher loss is worth less)
    high: float | None
    has_interval: bool = True  # False: the comparison had no test, so no interval to read

    def text(self) -> str:
        def one(m: float | None) -> str:
            return "beyond" if m is None else f"{m:.3g}x"

        if self.multiplier is None:
            return BEYOND
        if not self.has_interval:
            return f"{one(self.multiplier)} (no interval)"
        if self.low is None and self.high is None:
            return f"{one(self.multiplier)} (interval {BEYOND})"
        return f"{one(self.multiplier)} [{one(self.low)}, {one(self.high)}]"


def compute_worth(flops: Sequence[float], loss: Sequence[float], variant_loss: float, variant_flops: float,
                  loss_low: float | None = None, loss_high: float | None = None) -> Worth:
    """The multiplier at the variant's loss, with the multipliers at the ends of its interval (low loss -> high m)."""
    def at(target: float | None) -> float | None:
        found = None if target is None else flops_at_loss(flops, loss, target)
        return None if found is None else found / variant_flops

    return Worth(at(variant_loss), at(loss_high), at(loss_low), loss_low is not None)
