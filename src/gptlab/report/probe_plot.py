"""The mechanism beside the LR-tuned verdict: the largest attention logit and the largest |log Z| each run's
stability probes saw, against the LR, per variant, as Wortsman et al. 2023 study them (§3.1).

Attention logit growth (Dehghani et al. 2023; Wortsman et al. 2023 §3.1.1): without QK-norm, attention logits grow
with the LR until the softmax is one-hot and the loss diverges; Wortsman et al. see the diverging runs' logits reach
the order of 1e4. ATTN_LOGIT_DIVERGENCE is that order, the level a run is said to cross. Output logit divergence
(Chowdhery et al. 2022; Wortsman et al. §3.1.2): log Z drifts away from 0; the paper gives no level, so |log Z| is
plotted without one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gptlab.atomic import atomic_write

ATTN_LOGIT_DIVERGENCE = 1e4  # Wortsman et al. 2023, §3.1.1: diverging runs' attention logits reach this order
SOURCE = ("Wortsman et al. 2023, \"Small-scale proxies for large-scale Transformer training instabilities\", "
          "§3.1.1 (after Dehghani et al. 2023)")


@dataclass(frozen=True)
class ProbePoint:
    variant: str
    lr: float
    job: str
    attn_logit_max: float | None
    log_z_max: float | None


def crossed(points: list[ProbePoint]) -> list[ProbePoint]:
    """The runs whose largest attention logit reached ATTN_LOGIT_DIVERGENCE (or went non-finite)."""
    return [p for p in points if p.attn_logit_max is not None
            and (not math.isfinite(p.attn_logit_max) or p.attn_logit_max >= ATTN_LOGIT_DIVERGENCE)]


def plot_probes(points: list[ProbePoint], title: str, path: Path) -> None:
    """Two panels against the LR (log-log): max attention logit with the divergence level, and max |log Z|; one
    colour per variant, one dot per run, the line through the mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    colours = plt.get_cmap("tab10")
    variants = list(dict.fromkeys(p.variant for p in points))
    for ax, attr, ylabel in ((axes[0], "attn_logit_max", "largest attention logit"),
                             (axes[1], "log_z_max", "largest |log Z| of the output logits")):
        for i, v in enumerate(variants):
            mine = [p for p in points if p.variant == v and getattr(p, attr) is not None]
            if not mine:
                continue
            values = [min(getattr(p, attr), 1e30) for p in mine]  # inf drawn at the top
            ax.plot([p.lr for p in mine], values, "o", color=colours(i % 10), alpha=0.6)
            lrs = sorted({p.lr for p in mine})
            means = [float(np.mean([val for p, val in zip(mine, values) if p.lr == lr])) for lr in lrs]
            ax.plot(lrs, means, "-", color=colours(i % 10), label=v)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    axes[0].axhline(ATTN_LOGIT_DIVERGENCE, color="red", linestyle="--", linewidth=1,
                    label=f"{ATTN_LOGIT_DIVERGENCE:.0e}: divergence level (Wortsman et al. 2023)")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{title}: stability probes against the LR (dots: runs; lines: mean over seeds)")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
