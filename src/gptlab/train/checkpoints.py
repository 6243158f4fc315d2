"""The one reader of gptlab training checkpoints: train (ckpt_path, resume), eval, sample and export all use it.

A checkpoint is what Lightning writes for a `GPTLitModule`: the model's config under
`hyper_parameters/model`, its weights under `state_dict` with the `model.` prefix (the module's attribute),
plus optimizer, scheduler, loop, RNG and data state for exact resume. It is read with weights_only=True
everywhere: it holds plain tensors and containers only, so loading a file from elsewhere runs no pickled code.
The layout is Lightning's, so it lives here, next to the LightningModule, and not in the model package.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any, Union

import torch

from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig

MODEL_PREFIX = "model."  # GPTLitModule keeps the GPT as self.model
PathLike = Union[str, Path]


def read_checkpoint(path: PathLike, what: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint's contents; a missing, truncated, foreign or empty file is a ConfigError naming it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what}={str(path)!r} is not a file; give a .ckpt written by src/train.py.")
    if path.stat().st_size == 0:
        raise ConfigError(f"{what}={str(path)!r} is empty (0 bytes): it was never completely written "
                          "(a full disk or a killed run); use another checkpoint of the run.")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"{what}={str(path)!r} cannot be read as a checkpoint ({path.stat().st_size:,} bytes; {reason}): it is "
            "truncated, corrupt or not a PyTorch checkpoint; use another checkpoint of the run."
        ) from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ConfigError(f"{what}={str(path)!r} is not a Lightning checkpoint (no state_dict); "
                          "give a .ckpt written by src/train.py.")
    return ckpt


def checkpoint_model_config(ckpt: dict[str, Any], path: PathLike) -> GPTConfig:
    """The GPTConfig a checkpoint was trained with."""
    values = (ckpt.get("hyper_parameters") or {}).get("model")
    if not isinstance(values, dict):
        raise ConfigError(f"{path} has no model config (hyper_parameters/model); was it written by src/train.py?")
    return GPTConfig.from_dict(values)


def checkpoint_model_state(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The GPT's own state dict, without the LightningModule's prefix."""
    return {k[len(MODEL_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(MODEL_PREFIX)}


def load_model(path: PathLike, what: str = "ckpt_path") -> tuple[GPT, dict[str, Any]]:
    """Rebuild the GPT of a training run from its checkpoint alone, and return the checkpoint's hyperparameters."""
    ckpt = read_checkpoint(path, what)
    model = GPT(checkpoint_model_config(ckpt, path))
    model.load_state_checked(checkpoint_model_state(ckpt), path)
    return model, ckpt.get("hyper_parameters") or {}


def config_differences(trained: GPTConfig, wanted: GPTConfig) -> list[str]:
    """`model.<field>` lines for every field in which a checkpoint's config and the run's config differ
    (fields that change how the model runs, not what it computes, are ignored)."""
    runtime = {"compile", "activation_checkpointing", "attn_impl", "dropout", "z_loss"}  # z_loss: objective only
    a, b = trained.to_dict(), wanted.to_dict()
    return [f"checkpoint has model.{k}={a[k]!r}, the config asks {b[k]!r}"
            for k in a if k not in runtime and a[k] != b[k]]


def check_resumable(path: PathLike, wanted: GPTConfig) -> None:
    """Fail before training starts if `path` is unreadable or holds a model of another shape than `wanted`."""
    ckpt = read_checkpoint(path)
    differences = config_differences(checkpoint_model_config(ckpt, path), wanted)
    if differences:
        raise ConfigError(
            f"ckpt_path={str(path)!r} does not match this run's model: {'; '.join(differences)}. Continue with the "
            "checkpoint's settings (drop those overrides), or start a new run without ckpt_path."
        )
