"""The one reader of gptlab training checkpoints: train (ckpt_path, resume), eval, sample and export all use it.

A checkpoint is what Lightning writes for a `GPTLitModule`: the model's config under
`hyper_parameters/model`, its weights under `state_dict` with the `model.` prefix (the module's attribute),
plus optimizer, scheduler, loop, RNG and data state for exact resume. It is read with weights_only=True
everywhere: it holds plain tensors and containers only, so loading a file from elsewhere runs no pickled code.
The layout is Lightning's, so it lives here, next to the LightningModule, and not in the model package.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional, Union

import torch

from gptlab.checkpoint import sharded
from gptlab.checkpoint.dcp_index import INDEX_FILE, ForeignIndex
from gptlab.checkpoint.dirs import CHECKPOINTS_DIR
from gptlab.checkpoint.errors import load_error_reason, unreadable_reason
from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig
from gptlab.recorded import check_recorded

log = logging.getLogger(__name__)
MODEL_PREFIX = "model."  # GPTLitModule keeps the GPT as self.model
PathLike = Union[str, Path]


class UnreadableCheckpoint(Exception):
    """Why a file is not a usable checkpoint; `read_checkpoint` turns it into a ConfigError with the advice."""


def _load_sharded(path: Path, weights: bool) -> dict[str, Any]:
    """A sharded checkpoint (trainer=fsdp): Lightning's meta.pt, plus the whole weights gathered when `weights`."""
    from torch.distributed.checkpoint.api import CheckpointException  # here: the package costs seconds to import

    try:
        missing = sharded.missing_parts(path)
    except ForeignIndex as err:
        raise UnreadableCheckpoint(f"its {INDEX_FILE} cannot be read: {err}") from err
    if missing:
        raise UnreadableCheckpoint(f"it is a sharded checkpoint folder that lacks {', '.join(missing)}: it was "
                                   "never completely written or was copied in part")
    try:
        ckpt = sharded.read_meta(path)
        if weights:
            ckpt["state_dict"] = sharded.read_full_state_dict(path)
    except CheckpointException as err:  # DCP's, a BaseException: the first rank's error says why
        first = next(iter(err.failures.values()), (err,))[0]
        raise UnreadableCheckpoint(f"its shards cannot be read: {load_error_reason(first)}") from err
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError... for bad files
        raise UnreadableCheckpoint(f"its shards cannot be read: {load_error_reason(err)}") from err
    return ckpt


def _load(path: Path, mmap: bool) -> dict[str, Any]:
    if sharded.is_sharded(path):
        return _load_sharded(path, weights=not mmap)
    if not path.exists():
        raise UnreadableCheckpoint("it does not exist")
    if not path.is_file():
        raise UnreadableCheckpoint("it is not a file")
    size = path.stat().st_size
    if size == 0:
        raise UnreadableCheckpoint("it is empty (0 bytes): it was never completely written (a full disk or a "
                                   "killed run)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError, IndexError... for bad files
        raise UnreadableCheckpoint(f"it cannot be read as a checkpoint ({size:,} bytes; "
                                   f"{unreadable_reason(path, err)})") from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise UnreadableCheckpoint("it is not a Lightning checkpoint of src/train.py (no state_dict)")
    return ckpt


def named(what: str, path: PathLike) -> str:
    """How a message names the path `what` gave: `ckpt_path='x'` for a config key, `the checkpoint argument 'x'`
    for a script's positional argument (`what` with a space), which no `key=` typed on its command line sets, and
    `gptlab.load('x')` for a Python call (`what` ending in `()`)."""
    if what.endswith("()"):
        return f"{what[:-1]}{str(path)!r})"
    return f"{what} {str(path)!r}" if " " in what else f"{what}={str(path)!r}"


def give(what: str, wanted: str) -> str:
    """The way out that gives another path, as it is typed: `ckpt_path=<...>`, `<...> as the checkpoint
    argument` for a positional argument, or `gptlab.load(<...>)` for a Python call."""
    if what.endswith("()"):
        return f"{what[:-1]}<{wanted}>)"
    return f"<{wanted}> as {what}" if " " in what else f"{what}=<{wanted}>"


def read_checkpoint(path: PathLike, what: str = "ckpt_path", mmap: bool = False) -> dict[str, Any]:
    """The checkpoint's contents; a missing, truncated, foreign or empty file is a ConfigError naming it.
    `mmap`: tensors stay on disk until touched (a cheap check that a file loads); for a sharded checkpoint folder,
    only its meta.pt is read (no `state_dict`) and its shard files are checked to be there."""
    try:
        return _load(Path(path), mmap)
    except UnreadableCheckpoint as err:
        raise ConfigError(f"{named(what, path)}: {err}; give " + give(what, "another checkpoint of the run: a .ckpt "
                          "written by src/train.py, or its run dir to take the newest one that loads") + "."
                          ) from err.__cause__


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoints of the run in `run_dir`, newest first: every `*.ckpt` (a file, or a sharded checkpoint's
    folder) in its `checkpoints/` dir, the one its checkpoint callbacks write. Nothing else is the run's: a .ckpt a
    user keeps elsewhere in the dir (mydata/pretrained.ckpt, or .ckpt files of a plain dir given as hydra.run.dir)
    is never continued by resume=auto nor deleted by resume=restart."""
    return _newest_first(run_dir / CHECKPOINTS_DIR)


def checkpoints_newest_first(directory: Path) -> list[Path]:
    """The checkpoints a dir given as ckpt_path offers, newest first: a run dir's (`run_checkpoints`), or for a dir
    without a checkpoints/ dir (a run's checkpoints/ dir itself, a dir of .ckpt files) the `*.ckpt` in it."""
    own = directory / CHECKPOINTS_DIR
    return _newest_first(own if own.is_dir() else directory)


def _newest_first(where: Path) -> list[Path]:
    """The `*.ckpt` in `where` newest first by the time each was completed (every checkpoint is renamed into place
    whole, which sets a folder's mtime too)."""
    found = (p for p in where.glob("*.ckpt") if p.is_file() or sharded.is_sharded(p)) if where.is_dir() else ()
    # last.ckpt first among equals: a hard link of the best has the best's mtime, and a run resumed from the best's
    # name would keep that file forever (Lightning never deletes the checkpoint a run resumed from).
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name == "last.ckpt"), reverse=True)


def checkpoint_problem(path: Path) -> Optional[str]:
    """Why `path` is not a loadable checkpoint (None: it loads); a cheap mmap'd load."""
    try:
        _load(path, mmap=True)
    except UnreadableCheckpoint as err:
        return str(err)
    return None


WEIGHTS_ONLY = ("it holds the weights only (no optimizer, scheduler, RNG or data position: a file such as "
                "scripts/convert_checkpoint.py writes for eval, sample and export), so no run can continue from it")


def _weights_only(path: Path, ckpt: dict[str, Any]) -> bool:
    """A one-file checkpoint without optimizer states (a sharded folder keeps them in its shards, not in meta.pt)."""
    return not sharded.is_sharded(path) and "optimizer_states" not in ckpt


def continue_problem(path: Path) -> Optional[str]:
    """Why a run cannot continue from `path` (None: it can): it does not load, or it holds the weights only."""
    try:
        ckpt = _load(path, mmap=True)
    except UnreadableCheckpoint as err:
        return str(err)
    return WEIGHTS_ONLY if _weights_only(path, ckpt) else None


def newest_loadable_checkpoint(directory: Path) -> Optional[Path]:
    """The newest of `directory`'s checkpoints (checkpoints_newest_first) that loads; each newer one that does not
    is skipped with a warning that names it and why."""
    for path in checkpoints_newest_first(directory):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        log.warning("skipping checkpoint %s: %s", path, problem)
    return None


def resolve_checkpoint(path: PathLike, what: str = "ckpt_path") -> Path:
    """`path` itself when it is a checkpoint (a file or a sharded folder); for a run dir (or its checkpoints/ dir),
    its newest checkpoint that loads."""
    path = Path(path)
    if path.is_dir() and not sharded.is_sharded(path):
        found = newest_loadable_checkpoint(path)
        if found is None:
            unread = checkpoints_newest_first(path)  # each skipped with a warning: the newest's reason is said here
            what_is = (f"a directory whose {len(unread)} checkpoint(s) do not load (the newest, {unread[0]}: "
                       f"{checkpoint_problem(unread[0])})" if unread else
                       "a directory without a readable checkpoint (*.ckpt)")
            raise ConfigError(f"{named(what, path)} is {what_is}; give "
                              + give(what, "a run dir of src/train.py that has saved one, or a .ckpt file") + ".")
        log.info("%s=%s: using its newest readable checkpoint, %s", what, path, found)
        return found
    return path


def checkpoint_model_config(ckpt: dict[str, Any], path: PathLike, what: str = "ckpt_path") -> GPTConfig:
    """The GPTConfig a checkpoint was trained with."""
    values = (ckpt.get("hyper_parameters") or {}).get("model")
    if not isinstance(values, dict):
        raise ConfigError(f"{named(what, path)} has no model config (hyper_parameters/model): src/train.py did not "
                          "write it; give " + give(what, "a .ckpt written by src/train.py, or its run dir") + ".")
    return GPTConfig.from_dict(values)


def checkpoint_model_state(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The GPT's own state dict, without the LightningModule's prefix."""
    return {k[len(MODEL_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(MODEL_PREFIX)}


def load_model(path: PathLike, what: str = "ckpt_path") -> tuple[GPT, dict[str, Any]]:
    """Rebuild the GPT of a training run from its checkpoint alone (or its run dir's newest readable one), and return
    the checkpoint's hyperparameters, whose recorded tokenizer names only a trusted class (gptlab.recorded)."""
    path = resolve_checkpoint(path, what)
    ckpt = read_checkpoint(path, what)
    check_recorded(recorded_tokenizer(ckpt.get("hyper_parameters") or {}), "tokenizer", str(path))
    model = GPT(checkpoint_model_config(ckpt, path, what))
    model.load_state_checked(checkpoint_model_state(ckpt), path, "Its weights are not those of the model it records; "
                             "pass " + give(what, "a checkpoint src/train.py wrote") + " (a run dir or its .ckpt).")
    return model, ckpt.get("hyper_parameters") or {}


def recorded_tokenizer(hparams: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The tokenizer config a checkpoint's run was trained with (None: a checkpoint that does not record it)."""
    return (hparams.get("run") or {}).get("tokenizer")


def check_tokenizer_matches(recorded: Optional[dict[str, Any]], given: Optional[dict[str, Any]], fix: str) -> None:
    """A model reads token ids, so a tokenizer other than the one it was trained with feeds it other text and decodes
    its output to garbage (eval.py and sample.py alike). `recorded` None: the model does not say (nothing to check);
    `given` None: the recorded one will be used. `fix` says what to pass instead."""
    if recorded is not None and given is not None and recorded != given:
        raise ConfigError(f"the checkpoint was trained with tokenizer {recorded} but this run has {given}: its ids "
                          f"would stand for other text; {fix}.")


def tokenizer_overrides(recorded: dict[str, Any]) -> str:
    """The overrides that give a run the tokenizer a checkpoint recorded: its conf/tokenizer option (named after a
    tiktoken encoding, or `bytes`) and a ranks_file it was given."""
    if "encoding" not in recorded:
        return "tokenizer=bytes"
    ranks = f" tokenizer.ranks_file={recorded['ranks_file']}" if recorded.get("ranks_file") else ""
    return f"tokenizer={recorded['encoding']}{ranks}"


def check_tokenizer_fits(tokenizer: Any, model: GPT, fix: str) -> None:
    """A tokenizer with more ids than the model's embedding rows would index past them; `fix` says what to pass."""
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ConfigError(f"tokenizer {tokenizer.name} has {tokenizer.vocab_size} ids, more than the model's "
                          f"vocab_size={model.config.vocab_size}; pass the training run's {fix}.")


def config_differences(trained: GPTConfig, wanted: GPTConfig) -> list[str]:
    """`model.<field>` lines for every field in which a checkpoint's config and the run's config differ
    (fields that change how the model runs, not what it computes, are ignored)."""
    runtime = {"attn_impl", "dropout", "z_loss"}  # z_loss: objective only
    a, b = trained.to_dict(), wanted.to_dict()
    return [f"checkpoint has model.{k}={a[k]!r}, the config asks {b[k]!r}"
            for k in a if k not in runtime and a[k] != b[k]]


def check_resumable(path: PathLike, wanted: GPTConfig, fsdp: bool = False, optimizer: Optional[str] = None,
                    found_in_run_dir: bool = False) -> None:
    """Fail before training starts if `path` is unreadable or holds a model of another shape than `wanted`, or is a
    sharded checkpoint and this run (`fsdp`: under trainer=fsdp) cannot load one, or was trained with another
    optimizer than `optimizer` (its _target_): one optimizer's state does not load into another's (Muon's), or
    loads and fails at the first step (SGD after AdamW: KeyError 'momentum')."""
    # `found_in_run_dir`: resume=auto found `path` in the run dir; no ckpt_path was typed, so none is to drop
    new_run = ("give a new hydra.run.dir (without resume=auto)" if found_in_run_dir else "drop ckpt_path")
    if sharded.is_sharded(Path(path)) and not fsdp:
        raise ConfigError(f"ckpt_path={str(path)!r} is a sharded checkpoint (a folder, written under trainer=fsdp); "
                          "continue it with trainer=fsdp (on any number of ranks: trainer.devices=1 too), or "
                          f"{new_run} to start a new run.")
    ckpt = read_checkpoint(path, mmap=True)
    if _weights_only(Path(path), ckpt):
        raise ConfigError(f"ckpt_path={str(path)!r}: {WEIGHTS_ONLY}. Give ckpt_path=<the run's own checkpoint: its "
                          "run dir, or the sharded folder the file was converted from>, or "
                          f"{new_run} to start a new run.")
    differences = config_differences(checkpoint_model_config(ckpt, path), wanted)
    if differences:
        raise ConfigError(
            f"ckpt_path={str(path)!r} does not match this run's model: {'; '.join(differences)}. Continue with the "
            f"checkpoint's settings, or {new_run} to start a new run."
        )
    trained_with = (((ckpt.get("hyper_parameters") or {}).get("run") or {}).get("optimizer") or {}).get("_target_")
    if optimizer is not None and trained_with is not None and trained_with != optimizer:
        raise ConfigError(
            f"ckpt_path={str(path)!r} was trained with optimizer={_option(trained_with)} ({trained_with}) and this "
            f"run asks for optimizer={_option(optimizer)} ({optimizer}): one's state does not carry over to the "
            f"other. Continue it with optimizer={_option(trained_with)}, or start a new run from step 0 with the "
            f"other optimizer ({new_run}; for this run dir, resume=restart)."
        )


def _option(target: str) -> str:
    """conf/optimizer/'s option for an optimizer's _target_: its last name, lower-case (adamw, muon, sgd, adafactor)."""
    return target.rsplit(".", 1)[-1].lower()
