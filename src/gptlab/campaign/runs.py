"""A sweep's finished jobs as the campaign's run records: the variant each belongs to, its config as a diff against
the campaign's baseline, seed, code version, device, and what it trained (tokens, FLOPs, wall seconds) and reached
(final and best val/loss). Read through the ablation report's loader, so the campaign and the report agree on what a
sweep holds."""

from __future__ import annotations

import hashlib
import platform
import socket
import subprocess
from pathlib import Path

from gptlab.campaign.ledger import TAG, Campaign, Record, dumps
from gptlab.report.runs import SEED_KEY, JobResult, drop_repeats, load_sweep
from gptlab.report.verdicts import job_paired, job_seed

# where a run was written and logged, not what it trained: not part of a variant
SETTINGS = (SEED_KEY, "campaign", "logger")
SETTING_KEYS = ("hydra.", "paths.", "logger.")


def setting(overrides: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in overrides.items() if k not in SETTINGS and not k.startswith(SETTING_KEYS)}


def variant_key(overrides: dict[str, str], label: str | None, root: tuple[dict[str, str], str]) -> str:
    """A variant's name in the campaign: the label it was given (an A/A arm: the baseline's config under another
    name), else its overrides where they differ from the campaign's first baseline (`root`: its overrides and
    name), which never changes, so a name stays the same across promotions."""
    if label:
        return label
    return " ".join(f"{k}={v}" for k, v in sorted(config_diff(overrides, root[0]).items())) or root[1]


def config_diff(overrides: dict[str, str], baseline: dict[str, str]) -> dict[str, str]:
    """The overrides where this run differs from the baseline (a baseline key it lacks: `(baseline's default)`)."""
    mine = setting(overrides)
    diff = {k: v for k, v in mine.items() if baseline.get(k) != v}
    diff.update({k: "(default)" for k in baseline if k not in mine})
    return diff


def code_version(cwd: Path) -> tuple[str, str]:
    """The checkout's commit and a hash of its uncommitted changes ("clean" when none; "unknown" outside git)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout
    try:
        commit = git("rev-parse", "HEAD").strip()
        changes = git("diff", "HEAD") + git("status", "--porcelain", "--untracked-files=all")
    except (OSError, subprocess.CalledProcessError):
        return "unknown", "unknown"
    return commit, hashlib.sha256(changes.encode()).hexdigest()[:12] if changes else "clean"


def device_kind() -> str:
    """What a wall-clock budget depends on: the GPU's name, else the CPU's model."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine())


def _record(job: JobResult, baseline: dict[str, str], root: tuple[dict[str, str], str], label: str | None,
            purpose: str, where: dict[str, str]) -> Record:
    summary = job.summary
    tokens = job.tokens_seen
    flops = tokens * job.cost.flops_per_token if tokens is not None and job.cost is not None else None
    tags = {TAG + "variant": variant_key(job.overrides, label, root), TAG + "seed": job_seed(job),
            TAG + "paired": str(job_paired(job)).lower(), TAG + "purpose": purpose,
            TAG + "job_dir": str(job.job_dir.resolve()),
            TAG + "overrides": dumps(setting(job.overrides)), **{TAG + k: v for k, v in where.items()}}
    metrics = {"final_val_loss": summary.get("final_val_loss"), "best_val_loss": summary.get("best_val_loss"),
               "tokens": tokens, "flops": flops, "wall_seconds": summary.get("fit_seconds"),
               "train_seconds": summary.get("train_seconds")}
    params = {f"diff.{k}": v for k, v in config_diff(job.overrides, baseline).items()}
    return Record("run", tags, params or {"diff": "none (the baseline's config)"},
                  {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})


def sweep_records(sweep_dir: Path, campaign: Campaign, baseline: dict[str, str], root: tuple[dict[str, str], str],
                  label: str | None = None, purpose: str = "explore", device: str | None = None) -> list[Record]:
    """Records for the sweep's finished jobs not in the ledger yet (a job dir is recorded once); `baseline`: the
    current baseline's overrides, which each run's config is recorded as a diff against."""
    known = {r.tag("job_dir") for r in campaign.of("run")}
    jobs, _ = drop_repeats(load_sweep(sweep_dir))
    commit, dirty = code_version(Path.cwd())
    where = {"commit": commit, "uncommitted": dirty, "device": device or device_kind(), "host": socket.gethostname(),
             "sweep_dir": str(sweep_dir.resolve())}
    return [_record(job, baseline, root, label, purpose, where) for job in jobs
            if str(job.job_dir.resolve()) not in known and job.summary.get("final_val_loss") is not None]
