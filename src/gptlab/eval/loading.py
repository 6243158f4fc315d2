"""`gptlab.load`: a trained model and its tokenizer in one call, for notebooks and scripts.

    import gptlab
    model, tokenizer = gptlab.load("outputs/runs/train/2026-11-28/10-00-00")   # a run dir, a .ckpt or an HF dir
    (score,) = score_texts(model, tokenizer, [("The capital of France is", " Paris")])  # docs/without-lightning.md

The model is the plain `GPT` (an nn.Module, in eval mode, on the CPU); the tokenizer is the one the run recorded,
built only if it names a trusted class (gptlab.recorded: a checkpoint cannot name something else to run)."""

from __future__ import annotations

import os
from typing import Any, Mapping, NamedTuple, Optional, Union

from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError
from gptlab.model import GPT
from gptlab.recorded import build_recorded

PYTHON_CALL = "gptlab.load()"  # how a refusal names the path and its way out: gptlab.load('x'), not ckpt_path=


class Loaded(NamedTuple):
    model: GPT
    tokenizer: Tokenizer


def tokenizer_from_record(recorded: Optional[Mapping[str, Any]], source: str) -> Tokenizer:
    """Build the tokenizer a run recorded in the file `source` (its `_target_` and keyword arguments), refusing any
    class that is not trusted (gptlab.recorded)."""
    if recorded is None:
        raise ConfigError(f"{source} does not record the tokenizer it was trained with; build one yourself, e.g. "
                          "gptlab.data.tokenizers.ByteTokenizer(), and pass it where you use the model.")
    return build_recorded(recorded, "tokenizer", source)


def load(path: Union[str, os.PathLike[str]]) -> Loaded:
    """(model, tokenizer) of a training run: its run dir (the newest checkpoint that loads), one of its .ckpt files,
    or a Hugging Face directory written by scripts/export_hf.py."""
    from gptlab.checkpoint.reader import resolve_checkpoint
    from gptlab.eval.sampling import is_hf_directory, load_model, recording_file  # sample.py's loader

    path = os.fspath(path)
    if not is_hf_directory(path):  # a run dir resolved once, as sample.py does: the file read is the one named
        path = str(resolve_checkpoint(path, PYTHON_CALL))
    model, recorded = load_model(path, PYTHON_CALL)
    return Loaded(model.eval(), tokenizer_from_record(recorded, recording_file(path)))
