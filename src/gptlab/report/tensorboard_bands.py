"""Seed bands where users look: for each variant, its mean val/loss over seeds and the band the report's PNG shades,
written as TensorBoard scalars under <sweep dir>/seed_bands/, so `tensorboard --logdir <sweep dir>` opens on them.

TensorBoard's Time Series and Scalars tabs draw one line per run and tag and cannot shade, and they sort tag groups
by name; the Custom Scalars margin chart shades, but only for three tags of one run. So each band is written twice:
- the `seeds/` group, first on the opening screen: card `seeds/val_loss`, one line per variant (runs
  `seed_bands/<variant>`, the comparison), then one card per variant, `seeds/val_loss · <variant>`, holding that
  variant's mean and its band's edges as three runs (`seed_bands/~mean`, `~low`, `~high`, the same three colours on
  every card);
- the margin chart of the Custom Scalars tab, per variant run: tags `x_seed_bands/val_loss_mean`, `_low` and `_high`
  (the `x_` group sorts after train/ and val/, as x_throughput/ does; no tag of the chart is a prefix of the
  `seeds/` cards' tags, so its regex finds nothing in the edge runs).
Checked by reading the event files back, over the server's HTTP routes, and in Chromium (tests/)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

BANDS_DIR = "seed_bands"
COMPARISON_TAG = "seeds/val_loss"  # the first card: each variant's mean
TAGS = ("x_seed_bands/val_loss_mean", "x_seed_bands/val_loss_low", "x_seed_bands/val_loss_high")  # the margin chart
EDGE_RUNS = ("~mean", "~low", "~high")  # "~" never ends up in a run_name, so no variant's run can be one of these


def run_name(label: str) -> str:
    """A variant's label as a dir name: `model.pos_emb=rope` stays readable, a `/` or space does not split it."""
    return re.sub(r"[^A-Za-z0-9_.=,+\-\[\]]", "_", label) or "all_jobs"


def variant_tag(label: str) -> str:
    """The tag of a variant's own card: its mean and band edges."""
    return f"{COMPARISON_TAG} · {label}"


def write_seed_bands(sweep_dir: Path, variants: list[Any], band: str) -> Path:
    """Rewrites <sweep dir>/seed_bands from the variants' curves over optimizer steps, at the step of each point."""
    from torch.utils.tensorboard import SummaryWriter

    root = sweep_dir / BANDS_DIR
    shutil.rmtree(root, ignore_errors=True)  # a rerun of the report must not stack a second copy of each curve
    edges = {name: SummaryWriter(log_dir=str(root / name)) for name in EDGE_RUNS}
    shade = "min–max" if band == "minmax" else "±1 std"
    for variant in variants:
        curve = variant.curve("steps", band)
        if curve is None:
            continue
        writer = SummaryWriter(log_dir=str(root / run_name(variant.label)))
        writer.add_custom_scalars_marginchart(list(TAGS), category="seed bands", title=f"val/loss over seeds ({shade})")
        for x, mean, low, high in zip(curve.x, curve.mean, curve.low, curve.high):
            step = int(round(x))
            writer.add_scalar(COMPARISON_TAG, float(mean), global_step=step)
            for tag, value in zip(TAGS, (mean, low, high)):
                writer.add_scalar(tag, float(value), global_step=step)
            for edge, value in zip(EDGE_RUNS, (mean, low, high)):
                edges[edge].add_scalar(variant_tag(variant.label), float(value), global_step=step)
        writer.close()
    for writer in edges.values():
        writer.close()
    return root
