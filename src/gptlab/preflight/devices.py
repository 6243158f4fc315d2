"""Checks a torch device name given by the user (sample.py's `device`, the lm-eval adapter's `--device`,
bench_generate's `device`) before anything is moved there, and picks the default the machine has.

torch answers `cuda` on a machine without CUDA with an AssertionError from deep inside `Tensor.to`, and a bad
name with a RuntimeError listing every backend it knows; neither says which option to change.
"""

from __future__ import annotations

from typing import Any

import torch

from gptlab.errors import ConfigError


def default_device() -> str:
    """What the machine has: cuda when a GPU is visible, else mps (Apple), else cpu."""
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def check_device(field: str, value: Any) -> torch.device:
    """The torch.device `value` names, if this machine has it; else a ConfigError naming `field`."""
    try:
        device = torch.device(str(value))
    except RuntimeError as err:
        raise ConfigError(f"{field}={value!r} is not a device name; use cpu, cuda, cuda:<index> or mps "
                          f"(this machine has {default_device()}: {field}={default_device()}).") from err
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"{field}={value!r} but this machine has no CUDA GPU (torch.cuda.is_available() is "
                              f"False); use {field}={default_device()}.")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"{field}={value!r} but this machine has {count} CUDA GPU(s) (cuda:0 to "
                              f"cuda:{count - 1}); use e.g. {field}=cuda:0.")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{field}={value!r} but this machine has no Apple GPU (MPS); use {field}={default_device()}.")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"{field}={value!r}: gptlab runs on cpu, cuda or mps; use {field}={default_device()}.")
    return device
