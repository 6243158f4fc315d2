"""`gptlab.load`: a trained model and its tokenizer in one call, for notebooks and scripts.

    import gptlab
    model, tokenizer = gptlab.load("outputs/runs/train/2026-11-28/10-00-00")   # a run dir, a .ckpt or an HF dir
    (score,) = score_texts(model, tokenizer, [("The capital of France is", " Paris")])  # docs/without-lightning.md

The model is the plain `GPT` (an nn.Module, in eval mode, on the CPU); the tokenizer is the one the run recorded.
A recorded tokenizer is data, not code: only gptlab's own tokenizer classes are built from it, so a checkpoint
cannot name something else to run (Hydra's instantiate would import and call whatever `_target_` it names)."""

from __future__ import annotations

import os
from typing import Any, Mapping, NamedTuple, Optional, Union

from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer, Tokenizer
from gptlab.errors import ConfigError
from gptlab.model import GPT

# The classes conf/tokenizer/*.yaml name: the only ones a recorded tokenizer config may build.
TOKENIZER_CLASSES = {f"{cls.__module__}.{cls.__name__}": cls for cls in (ByteTokenizer, TiktokenTokenizer)}


class Loaded(NamedTuple):
    model: GPT
    tokenizer: Tokenizer


def tokenizer_from_record(recorded: Optional[Mapping[str, Any]], source: str) -> Tokenizer:
    """Build the tokenizer a run recorded (its `_target_` and keyword arguments), refusing any class but gptlab's."""
    if recorded is None:
        raise ConfigError(f"{source} does not record the tokenizer it was trained with; build one yourself, e.g. "
                          "gptlab.data.tokenizers.ByteTokenizer(), and pass it where you use the model.")
    target = recorded.get("_target_")
    if target not in TOKENIZER_CLASSES:
        raise ConfigError(f"{source} records the tokenizer _target_ {target!r}, which is not one of gptlab's "
                          f"tokenizers ({', '.join(sorted(TOKENIZER_CLASSES))}); it is not built.")
    return TOKENIZER_CLASSES[target](**{k: v for k, v in recorded.items() if k != "_target_"})


def load(path: Union[str, os.PathLike[str]]) -> Loaded:
    """(model, tokenizer) of a training run: its run dir (the newest checkpoint that loads), one of its .ckpt files,
    or a Hugging Face directory written by scripts/export_hf.py."""
    from gptlab.eval.sampling import load_model  # the loader sample.py uses: checkpoints and HF dirs alike

    model, recorded = load_model(os.fspath(path))
    return Loaded(model.eval(), tokenizer_from_record(recorded, os.fspath(path)))
