"""Loss by position as a PNG: one panel per model (a checkpoint, or a report's variant), one curve per context, the
trained context marked, so a reader sees where past T the loss rises or stays flat. Curves are binned (`binned`):
a per-position mean over a few windows is noise that hides the trend; the CSV keeps every position."""

from __future__ import annotations

from pathlib import Path

from gptlab.atomic import atomic_write

Curves = dict[int, list[float]]  # context -> mean NLL at positions 0..context-1
POINTS = 64  # a curve is drawn as at most this many bins: per-position means are noisy bands at L=256 and beyond


def binned(values: list[float], points: int = POINTS) -> tuple[list[float], list[float]]:
    """(bin centres, bin means) of a per-position curve cut into at most `points` equal runs of positions; the raw
    per-position numbers stay in loss_by_position.csv. Position 0 (no context at all) keeps a bin of its own."""
    if len(values) <= points:
        return [float(p) for p in range(len(values))], list(values)
    width = -(-(len(values) - 1) // (points - 1))
    xs, ys = [0.0], [values[0]]
    for start in range(1, len(values), width):
        run = values[start:start + width]
        xs.append(start + (len(run) - 1) / 2)
        ys.append(sum(run) / len(run))
    return xs, ys


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
                ax.plot(*binned(curves[context]), color=shade, linewidth=1, label=f"L={context}")
        ax.axvline(trained - 0.5, color="red", linestyle="--", linewidth=1, label=f"trained T={trained}")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("position in the window")
        ax.grid(alpha=0.3)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"mean NLL (nats), in ≤{POINTS} bins")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
