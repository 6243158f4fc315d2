"""The ablation report's plot: each variant's mean val/loss across seeds with a shaded band, one colour each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gptlab.atomic import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

X_LABELS = {"tokens": "tokens seen", "flops": "training FLOPs", "seconds": "wall-clock seconds"}


class Variant(Protocol):
    """What a plotted line needs (gptlab.report.runs.Variant has it)."""

    label: str

    def curve(self, x_axis: str, band: str) -> Any: ...


def val_loss_figure(variants: list[Variant], x_axis: str, band: str = "minmax", title: str = "sweep",
                    matched_x: float | None = None) -> Figure:
    """Built apart from saving so tests can count its bands (one PolyCollection per variant with >1 seed)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display here or on cluster nodes
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("tab10")
    for i, variant in enumerate(variants):
        curve = variant.curve(x_axis, band)
        if curve is None:
            continue
        colour = colours(i % 10)
        unstable = getattr(variant, "unstable_note", "")  # ", 1 of 3 unstable": instability is a result too
        ax.plot(curve.x, curve.mean, marker="o", color=colour, label=f"{variant.label} (n={curve.n}{unstable})")
        if curve.n > 1:
            ax.fill_between(curve.x, curve.low, curve.high, color=colour, alpha=0.2, linewidth=0)
    if matched_x is not None:
        ax.axvline(matched_x, color="grey", linestyle="--", linewidth=1, label="matched FLOPs")
    ax.set_xlabel(X_LABELS[x_axis])
    ax.set_ylabel("val/loss (nats per token)")
    ax.set_title(f"{title}: mean over seeds, band {'min–max' if band == 'minmax' else '±1 std'}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_val_loss(variants: list[Variant], x_axis: str, band: str, title: str, path: Path,
                  matched_x: float | None = None) -> None:
    import matplotlib.pyplot as plt

    fig = val_loss_figure(variants, x_axis, band, title, matched_x)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)
