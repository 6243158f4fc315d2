"""Loss by position as a PNG: one panel per model (a checkpoint, or a report's variant), one curve per context, the
trained context marked, so a reader sees where past T the loss rises or stays flat."""

from __future__ import annotations

from pathlib import Path

from gptlab.atomic import atomic_write

Curves = dict[int, list[float]]  # context -> mean NLL at positions 0..context-1


def plot_loss_by_position(panels: dict[str, tuple[Curves, int]], path: Path, title: str) -> None:
    """`panels`: {panel title: (curves, trained context)}; panels share the y axis so schemes compare."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display here or on cluster nodes
    import matplotlib.pyplot as plt

    n = len(panels)
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), sharey=True, squeeze=False)
    colours = plt.get_cmap("viridis")
    contexts = sorted({c for curves, _ in panels.values() for c in curves})
    for ax, (name, (curves, trained)) in zip(axes.flat, panels.items()):
        for i, context in enumerate(contexts):
            if context in curves:
                shade = colours(i / max(1, len(contexts) - 1) * 0.85)
                ax.plot(range(context), curves[context], color=shade, linewidth=1, label=f"L={context}")
        ax.axvline(trained - 0.5, color="red", linestyle="--", linewidth=1, label=f"trained T={trained}")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("position in the window")
        ax.grid(alpha=0.3)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("mean NLL (nats)")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
