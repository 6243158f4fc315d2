"""`scripts/bench_train.py --device cuda --parts fsdp`: gpt3_xl under trainer=fsdp on one GPU, as a user runs it, one
run per activation checkpointing mode: tokens/s, MFU (model FLOPs), HFU (with what checkpointing recomputes), and the
allocator's peak against the memory estimate scripts/plan.py and train's check give for the same config (issue 31:
MFU >= 40%, the peak within 15% of the estimate).

Each run is `python src/train.py` in its own process (FSDP's process group and CUDA memory start clean) with a
callback that records the peak; the estimate is computed from the config the run resolved (config_resolved.yaml),
so it is the run's own. The same code runs on a CPU at a tiny size (tests/test_bench_fsdp.py): no peak, no MFU.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from omegaconf import OmegaConf

from gptlab.config.schemas import Runtime
from gptlab.preflight.early_checks import build_model_config
from gptlab.preflight.planning import estimate_memory
from gptlab.recorded import build_recorded
from gptlab.runs.run_dir import RESOLVED_CONFIG, event_files

# Speed and memory, not checkpoints: a 1.3B model's checkpoint with Adam states is ~17 GB a write.
XL_FSDP = ["model=gpt3_xl", "trainer=fsdp", "trainer.devices=1", "trainer.accelerator=gpu", "data.batch_size=4",
           "callbacks.text_samples=null", "callbacks.model_checkpoint=null", "callbacks.periodic_checkpoint=null",
           "callbacks.preemption_checkpoint=null"]
MODES = {"selective": "selective", "full": "true", "none": "false"}  # row -> runtime.activation_checkpointing
PEAK_FILE = "peak_memory.json"


class PeakMemory(L.Callback):
    """Writes the CUDA allocator's peak over training (reset when training starts) to <run dir>/peak_memory.json:
    what the GPU held for weights, gradients, Adam states, FSDP's buffers and activations, without the CUDA context."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
        if trainer.is_global_zero:
            self.path.write_text(json.dumps({"peak_bytes": peak}))


def planned_bytes(run: Path) -> float:
    """The estimate train's memory check made for this run, per process, less the process's runtime (the CUDA
    context and the interpreter, which the allocator's peak does not see)."""
    cfg = OmegaConf.load(run / RESOLVED_CONFIG)
    vocab = build_recorded(cfg.tokenizer, "tokenizer", str(run / RESOLVED_CONFIG)).vocab_size
    model_cfg = build_model_config(cfg.model, vocab)
    est = estimate_memory(model_cfg, cfg.data.batch_size, cfg.trainer, "gpu", Runtime(**cfg.get("runtime", {})))
    return est.states + est.buffers + est.activations


def last_scalars(run: Path) -> dict[str, float]:
    """The last value of each x_throughput scalar (the window's average once the window is full)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, float] = {}
    for path in event_files(run):
        acc = EventAccumulator(str(path))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            if tag.startswith("x_throughput/"):
                out[tag] = acc.Scalars(tag)[-1].value
    return out


def _pct(value: Optional[float]) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1%}"


def fsdp_run(root: Path, run: Path, overrides: list[str], steps: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(root / "src" / "train.py"), *overrides, f"trainer.max_steps={steps}",
           f"trainer.val_check_interval={steps}", "trainer.limit_val_batches=1", "trainer.log_every_n_steps=1",
           f"callbacks.throughput.window_size={max(2, steps // 3)}", f"data.samples_per_epoch={steps * 64 + 64}",
           f"+callbacks.peak._target_={__name__}.PeakMemory", f"+callbacks.peak.path={run / PEAK_FILE}",
           f"hydra.run.dir={run}"]
    return subprocess.run(cmd, capture_output=True, text=True)


def bench_fsdp(root: Path, steps: int = 12, overrides: Optional[list[str]] = None,
               modes: tuple[str, ...] = tuple(MODES)) -> list[str]:
    """One row per checkpointing mode of `overrides` (default: gpt3_xl, trainer=fsdp, one GPU, micro-batch 4)."""
    overrides = overrides if overrides is not None else XL_FSDP
    rows = [f"| FSDP, `{' '.join(overrides)}`, {steps} steps | tokens/s | MFU | HFU | peak memory | plan.py "
            "estimate | estimate / peak |", "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        for mode in modes:
            run = Path(tmp) / mode
            done = fsdp_run(root, run, [*overrides, f"runtime.activation_checkpointing={MODES[mode]}"], steps)
            if done.returncode:
                rows.append(f"| activation checkpointing {mode} | run failed ({done.returncode}): "
                            f"{done.stderr.strip()[-600:]} | | | | | |")
                continue
            scalars = last_scalars(run)
            peak: Any = json.loads((run / PEAK_FILE).read_text())["peak_bytes"]
            planned = planned_bytes(run)
            ratio = f"{planned / peak:.2f}" if peak else "-"
            peak_text = f"{peak / 2**30:.2f} GiB" if peak else "- (no CUDA)"
            tokens_per_sec = scalars.get("x_throughput/tokens_per_sec", math.nan)
            mfu, hfu = _pct(scalars.get("x_throughput/mfu")), _pct(scalars.get("x_throughput/hfu"))
            rows.append(f"| activation checkpointing {mode} | {tokens_per_sec:,.0f} | {mfu} | {hfu} | {peak_text} | "
                        f"{planned / 2**30:.2f} GiB | {ratio} |")
    return rows
