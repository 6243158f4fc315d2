"""The words for a process the kernel's OOM killer most likely ended, with the memory ways out: one home for the lost
rank's message (gptlab.launch.rank_watch) and the main process's (gptlab.launch.death_watch)."""

from __future__ import annotations

from typing import Optional


def killed_for_memory(batch: Optional[int], ranks: int) -> str:
    """Why a SIGKILL nobody sent on purpose ended a process, and what makes the run fit: half the micro-batch
    `batch` (where it can be halved), activation checkpointing, fewer ranks per machine (where it has several)."""
    smaller = f"data.batch_size={max(1, batch // 2)}" if isinstance(batch, int) and batch > 1 else \
        "a smaller model.block_size or model"
    fewer = ", or fewer ranks per machine (trainer.devices)" if ranks > 1 else ""
    return ("most likely by the kernel's OOM killer: the machine ran out of memory (`dmesg | grep -i oom` names the "
            f"process). Give it less to hold: {smaller}, or runtime.activation_checkpointing=true{fewer}; with "
            "check_memory=true train refuses a run its estimate does not fit")
