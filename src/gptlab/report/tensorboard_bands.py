"""Seed bands where users look: for each variant, its mean val/loss over seeds and the band the report's PNG shades,
written as TensorBoard scalars under <sweep dir>/seed_bands/<variant>/ with a custom-scalars margin chart (mean,
low, high), so `tensorboard --logdir <sweep dir>` can show the bands of val_loss.png: the Scalars tab as three curves
per variant (run `seed_bands/<variant>`, tags seeds/val_loss_*), the Custom Scalars tab as the margin chart that
TensorBoard draws as a line with a shaded band for each run. Checked by reading the event files back, not in a
browser."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

BANDS_DIR = "seed_bands"
TAGS = ("seeds/val_loss_mean", "seeds/val_loss_low", "seeds/val_loss_high")


def run_name(label: str) -> str:
    """A variant's label as a dir name: `model.pos_emb=rope` stays readable, a `/` or space does not split it."""
    return re.sub(r"[^A-Za-z0-9_.=,+\-\[\]]", "_", label) or "all_jobs"


def write_seed_bands(sweep_dir: Path, variants: list[Any], band: str) -> Path:
    """Rewrites <sweep dir>/seed_bands from the variants' curves over optimizer steps, at the step of each point."""
    from torch.utils.tensorboard import SummaryWriter

    root = sweep_dir / BANDS_DIR
    shutil.rmtree(root, ignore_errors=True)  # a rerun of the report must not stack a second copy of each curve
    for variant in variants:
        curve = variant.curve("steps", band)
        if curve is None:
            continue
        writer = SummaryWriter(log_dir=str(root / run_name(variant.label)))
        shade = "min–max" if band == "minmax" else "±1 std"
        writer.add_custom_scalars_marginchart(list(TAGS), category="seed bands", title=f"val/loss over seeds ({shade})")
        for x, mean, low, high in zip(curve.x, curve.mean, curve.low, curve.high):
            for tag, value in zip(TAGS, (mean, low, high)):
                writer.add_scalar(tag, float(value), global_step=int(round(x)))
        writer.close()
    return root
