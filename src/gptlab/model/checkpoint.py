"""Loading weights into a GPT with a message that lists every mismatch, and reading Lightning checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Union

import torch

from gptlab.errors import ConfigError
from gptlab.model.config import GPTConfig
from gptlab.model.gpt import GPT


def load_state_checked(model: GPT, state: dict[str, torch.Tensor], source: Union[str, Path]) -> None:
    """load_state_dict(strict=True), but a mismatch names every missing, unexpected and mis-shaped key."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = [
        f"{key}: {tuple(state[key].shape)} in {source}, {tuple(expected[key].shape)} in the model"
        for key in sorted(set(expected) & set(state))
        if state[key].shape != expected[key].shape
    ]
    problems = [f"missing keys: {missing}"] * bool(missing) + [f"unexpected keys: {unexpected}"] * bool(unexpected)
    problems += [f"shape mismatches: {'; '.join(shapes)}"] * bool(shapes)
    if problems:
        raise ConfigError(f"{source} does not fit the model ({model.config.n_layer} layers, "
                          f"n_embd={model.config.n_embd}): " + " | ".join(problems))
    model.load_state_dict(state, strict=True)


def load_lightning_checkpoint(path: Union[str, Path]) -> GPT:
    """Rebuild the GPT of a training run from its checkpoint alone: the config travels in its hyperparameters."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"ckpt_path={str(path)!r} is not a file; give a Lightning .ckpt or a Hugging Face directory.")
    # weights_only=False: a Lightning checkpoint also pickles loop and callback state. Load only your own files.
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    try:
        model_cfg = GPTConfig.from_dict(ckpt["hyper_parameters"]["model"])
        state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    except (KeyError, TypeError) as err:
        raise ConfigError(f"{path} is not a gptlab training checkpoint (no {err} entry).") from err
    model = GPT(model_cfg)
    load_state_checked(model, state, path)
    return model
