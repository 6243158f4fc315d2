"""What rank 0 writes into the run dir before the first step: the resolved config and the banner, after clearing
what an earlier run left that this one replaces (resume=restart, temp files of a killed write) and checking that
every checkpoint dir can hold the checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from gptlab.apps.banner import banner_lines, vocab_warning
from gptlab.apps.build import Run
from gptlab.atomic import atomic_write_text, remove_stale_temp_files
from gptlab.execution.threads import banner_line as threads_line
from gptlab.preflight.checkpoint_plan import check_checkpoint_space
from gptlab.preflight.early_checks import Checked
from gptlab.preflight.output_dirs import check_output_dirs, checkpoint_bytes
from gptlab.runs.resume import start_over
from gptlab.runs.run_dir import RESOLVED_CONFIG
from gptlab.train.callbacks.preemption import PreemptionCheckpoint

log = logging.getLogger(__name__)


def write_setup_files(cfg: DictConfig, output_dir: Path, checked: Checked, run: Run, mode: Optional[str]) -> None:
    warning = vocab_warning(checked.model_cfg, cfg.model.get("vocab_size"), checked.tokenizer)
    if warning:
        log.warning(warning)
    if not run.trainer.is_global_zero or run.trainer.fast_dev_run:  # a smoke test writes no run files
        return
    removed = start_over(mode, output_dir)  # resume=restart: the earlier run's records go, named
    if removed:
        log.info("resume=restart: removed the earlier run's %s; training from step 0",
                 ", ".join(str(p.relative_to(output_dir)) for p in removed))
    checkpoint_dirs = sorted({Path(c.dirpath) for c in run.callbacks if isinstance(c, ModelCheckpoint) and c.dirpath}
                             | {c.path.parent for c in run.callbacks if isinstance(c, PreemptionCheckpoint)})
    for leftover in remove_stale_temp_files([output_dir, *checkpoint_dirs]):
        log.info("removed %s, a temp file left by a run killed while writing it", leftover)
    # Checkpoints are written beside their final name (AtomicCheckpointIO), never in $TMPDIR: their dirs are every
    # place they pass through.
    check_output_dirs(output_dir, checkpoint_dirs)
    check_checkpoint_space(cfg.get("callbacks"), checkpoint_bytes(run.model.num_parameters()),
                           (cfg.get("paths") or {}).get("log_dir"))
    save_resolved_config(cfg, output_dir)
    for line in banner_lines(cfg, checked.model_cfg, run.model.num_parameters(), checked.tokenizer, run.datamodule,
                             run.trainer, run.tokens_per_step, output_dir, checked.runtime, checked.fsdp):
        log.info(line)
    log.info(threads_line(run.threads))


def save_resolved_config(cfg: DictConfig, output_dir: Path) -> None:
    """To its file always; to the console only with print_config=true (it is ~130 lines)."""
    text = OmegaConf.to_yaml(cfg, resolve=True)
    if cfg.get("print_config"):
        log.info("Resolved config:\n%s", text)
    atomic_write_text(output_dir / RESOLVED_CONFIG, text)
