"""The run dir: the files a training run leaves there, named once (train/ writes them, eval/ and tools/ read them,
and neither side imports the other for a file name), and its removal when a run fails its checks.

Hydra creates the run dir (with `.hydra/` and the job log) before `train()` sees the config, so a typo would
leave an empty-looking dir in outputs/ for every failed attempt. `discard_on_config_error` removes it again when
the run stops on a ConfigError and the dir held nothing before this run but what Hydra itself writes.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator

from gptlab.cli import find_config_error

# Events: in <run name>/ for a single run (directly in it in runs made before), in <overrides>/ for a sweep job.
TENSORBOARD_DIR = "tensorboard"
RESOLVED_CONFIG = "config_resolved.yaml"  # the fully resolved config of the run (sample.py rebuilds from it)
SUMMARY_FILE = "run_summary.json"  # what a finished run measured; read by scripts/ablation_report.py

HYDRA_FILES = {".hydra", "train.log", RESOLVED_CONFIG}  # what a run writes before training starts


def event_files(run_dir: Path) -> list[Path]:
    """Every TensorBoard event file of a run, oldest first (a resumed run adds one): the one way to find them, since
    a sweep job's are one level deeper (`tensorboard/<overrides of the job>/`, named so TensorBoard shows them)."""
    files = (run_dir / TENSORBOARD_DIR).rglob("events.out.tfevents.*")
    return sorted((p for p in files if p.is_file()), key=lambda p: (p.stat().st_mtime_ns, p.name))


def holds_only_hydra_files(run_dir: Path) -> bool:
    return run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= HYDRA_FILES


@contextlib.contextmanager
def discard_on_config_error(run_dir: Path, stop_at: Path) -> Iterator[None]:
    """Remove `run_dir` (and parents it leaves empty, up to `stop_at`) if the body fails on a ConfigError."""
    fresh = not run_dir.exists() or holds_only_hydra_files(run_dir)
    try:
        yield
    except Exception as err:  # also a ConfigError that Hydra's instantiate wrapped in its own exception
        if find_config_error(err) is not None and fresh and holds_only_hydra_files(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
            parent, stop_at = run_dir.resolve().parent, stop_at.resolve()
            with contextlib.suppress(OSError):  # rmdir refuses a dir that is not empty: exactly the stop we want
                while stop_at in parent.parents:
                    parent.rmdir()
                    parent = parent.parent
        raise
