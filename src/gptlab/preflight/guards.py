"""Device and memory guards: compare what a run asks for with the machine before any process is spawned.

Without them, `trainer.devices=8` on a machine without GPUs lets Lightning start 8 CPU ranks of a 124M model
that the kernel's OOM killer ends minutes later, and `model.block_size=100000000` dies in the allocator. Both
now fail in a second with the numbers and what to type instead. The probes (`gpu_count`, `free_bytes`) are
module-level functions so tests can replace them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Callable, Optional

import torch

from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.preflight.batch_fit import MEMORY_MARGIN, Batching, suggested_batch
from gptlab.preflight.planning import (  # noqa: F401  (the estimate lives with the planner: one accounting for both)
    PROCESS_OVERHEAD_BYTES,
    STATE_BYTES_PER_PARAM,
    MemoryEstimate,
    estimate_memory,
    is_fsdp,
)

GB = 1e9


def gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def free_bytes(accelerator: str) -> float:
    """Free memory of one device: the first GPU's free memory, or the RAM the kernel reports available."""
    if accelerator == "gpu":
        free, _total = torch.cuda.mem_get_info(0)
        return float(free)
    with open("/proc/meminfo") as f:  # MemAvailable: what can be allocated without swapping (Linux)
        for line in f:
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def resolve_accelerator(accelerator: str) -> str:
    """'gpu' or 'cpu', as Lightning's `auto` would pick (mps counts as gpu: its own memory)."""
    if accelerator in ("gpu", "cuda", "mps"):
        return "gpu"
    if accelerator == "auto":
        return "gpu" if gpu_count() > 0 else "cpu"
    return "cpu"


def check_devices(trainer_cfg: Any, training: bool = True) -> None:
    """More GPUs than present (or more CPU processes than cores) fails, naming trainer.devices. `training`: the way
    out may name train's trainer= groups (eval.py has none)."""
    devices, accelerator = trainer_cfg.get("devices", 1), trainer_cfg.get("accelerator", "auto")
    if devices == "auto" or accelerator == "mps":
        return
    found = gpu_count()
    wants_gpus = accelerator in ("gpu", "cuda") or (accelerator == "auto" and devices > 1)
    if wants_gpus and devices > found:
        if found == 0 and not training:
            raise ConfigError(
                f"trainer.devices={devices} asks for {devices} GPUs but this machine has none "
                f"(torch.cuda.device_count() = 0, trainer.accelerator={accelerator}); use trainer.devices=1 "
                "trainer.accelerator=cpu, or a machine with GPUs."
            )
        if found == 0:
            strategy = "fsdp" if is_fsdp(trainer_cfg.get("strategy")) else "ddp"  # FSDP2 runs on CPU too (gloo)
            raise ConfigError(
                f"trainer.devices={devices} asks for {devices} GPUs but this machine has none "
                f"(torch.cuda.device_count() = 0, trainer.accelerator={accelerator}). For a CPU test of the same "
                f"code path type `trainer={strategy} trainer.accelerator=cpu trainer.devices=2`; for the real run use "
                f"a machine with {devices} GPUs (`python scripts/plan.py tokens=<count>` with this run's model=, "
                "trainer= and data.batch_size= shows the memory each GPU needs)."
            )
        raise ConfigError(
            f"trainer.devices={devices} asks for {devices} GPUs but this machine has {found} "
            f"(torch.cuda.device_count(), trainer.accelerator={accelerator}); use trainer.devices={found}, "
            "or trainer.num_nodes>1 on a cluster."
        )
    cores = os.cpu_count() or 1
    if accelerator == "cpu" and devices > cores:
        raise ConfigError(
            f"trainer.devices={devices} starts {devices} CPU processes but this machine has {cores} cores; "
            f"use trainer.devices={min(cores, 2)} (a CPU DDP test needs 2), or run on GPUs."
        )


def fsdp_gpus(est: MemoryEstimate, accelerator: str, free: float) -> int:
    """The fewest GPUs of this machine over which FSDP's sharding of the states would make the run fit, with
    MEMORY_MARGIN to spare (0: none would: a CPU run, one GPU, or activations that alone exceed the memory, which
    sharding does not divide)."""
    if accelerator == "cpu" or est.sharded_over != 1:
        return 0
    for gpus in range(2, gpu_count() + 1):
        if est.states / gpus + est.buffers + est.activations + PROCESS_OVERHEAD_BYTES <= free * (1 - MEMORY_MARGIN):
            return gpus
    return 0


SKIP_CHECK = "To skip this check, set the top-level key check_memory=false."


def check_memory(
    model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any, free: Optional[float] = None,
    runtime: Optional[Runtime] = None, parameters: Optional[int] = None, batching: Optional[Batching] = None,
) -> MemoryEstimate:
    """Refuse a run whose processes cannot fit in free RAM (CPU) or one GPU's free memory. `runtime`: the run's
    (checkpointing and compile change the activations; the planner counts the same bytes); `parameters`: the
    model's count, computed once by the preflight pass; `batching`: the run's step and corpus, which bound the
    micro-batch the refusal suggests (gptlab.preflight.batch_fit)."""
    accelerator = resolve_accelerator(trainer_cfg.get("accelerator", "auto"))
    est = estimate_memory(model_cfg, micro_batch, trainer_cfg, accelerator, runtime, parameters)
    free = free_bytes(accelerator) if free is None else free
    if est.total > free:
        where = "free RAM" if accelerator == "cpu" else "free memory on GPU 0"
        raise ConfigError(
            f"this run needs about {est.total / GB:,.1f} GB but {where} is {free / GB:,.1f} GB: "
            f"{est.processes} process(es) x {est.per_process / GB:,.1f} GB (weights+grads+Adam states "
            f"{est.states / GB:,.1f} GB for {est.parameters:,} parameters, "
            + (f"{'FSDP' if est.fsdp else 'DDP'}'s buffers {est.buffers / GB:,.1f} GB, " if est.buffers
               else "")
            + f"activations {est.activations / GB:,.1f} GB for micro-batch {micro_batch} x block_size "
            f"{model_cfg.block_size} with activation checkpointing {est.checkpointing}, "
            f"runtime {est.runtime / GB:.1f} GB). To make it fit (leaving {MEMORY_MARGIN:.0%} of the free memory "
            f"spare): {'; '.join(ways_to_fit(est, model_cfg, micro_batch, trainer_cfg, runtime, free, batching))}. "
            f"{SKIP_CHECK}"
        )
    return est


def ways_to_fit(est: MemoryEstimate, model_cfg: GPTConfig, micro_batch: int, trainer_cfg: Any,
                runtime: Optional[Runtime], free: float, batching: Optional[Batching]) -> list[str]:
    """The settings that make the run fit with MEMORY_MARGIN to spare, each of which passes the checks typed."""
    accelerator = resolve_accelerator(trainer_cfg.get("accelerator", "auto"))
    room = free * (1 - MEMORY_MARGIN)

    def estimate(size: int, run: Optional[Runtime]) -> MemoryEstimate:
        return estimate_memory(model_cfg, size, trainer_cfg, accelerator, run, est.parameters)

    def words(run: Optional[Runtime]) -> Callable[[int], str]:
        return lambda size: f"about {estimate(size, run).total / GB:,.1f} GB"

    plain = suggested_batch(lambda size: estimate(size, runtime).total <= room, micro_batch, batching,
                            words(runtime))
    ways = list(plain.words)
    if est.checkpointing != "full":
        full = replace(runtime or Runtime(compile=False), activation_checkpointing=True)
        if estimate(micro_batch, full).total <= room and not plain.also:
            ways.append(f"runtime.activation_checkpointing=true ({words(full)(micro_batch)})")
        else:
            larger = suggested_batch(lambda size: estimate(size, full).total <= room, micro_batch, batching,
                                     words(full)).batch
            if larger is not None and larger > (plain.batch or 0):
                ways.append(f"`runtime.activation_checkpointing=true data.batch_size={larger}"
                            f"{' ' + plain.also if plain.also else ''}` ({words(full)(larger)})")
    gpus = fsdp_gpus(est, accelerator, free)
    if gpus:
        ways.append(f"trainer=fsdp trainer.devices={gpus} (shards weights, gradients and Adam states over the GPUs)")
    ways.append(smaller_model(est, room))
    return ways


def smaller_model(est: MemoryEstimate, room: float) -> str:
    """The last way out. Where the weights, gradients and Adam states alone (with the buffers and the process's own
    memory) exceed the room, no model.block_size or batch fits: say so, and how many parameters would, instead of
    sending the user to a block size that is refused again when typed (issue 46)."""
    fixed = (est.states + est.buffers + est.runtime) * est.processes
    if fixed <= room:
        return "a smaller model.block_size or a smaller model preset"
    per_param = (est.states + est.buffers) / max(est.parameters, 1)
    fits = max(0.0, (room / est.processes - est.runtime) / per_param)
    return (f"a smaller model: its weights, gradients and Adam states alone need {fixed / GB:,.1f} GB"
            f"{f' over {est.processes} processes' if est.processes > 1 else ''} of the {room / GB:,.1f} GB that "
            f"fit, at any model.block_size or data.batch_size; one of at most about {fits / 1e6:,.0f}M parameters "
            "fits (scripts/count_params.py counts a model's)")
