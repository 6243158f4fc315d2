"""gptlab: GPT-1/2/3 pre-training and ablations with PyTorch Lightning and Hydra."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from gptlab.eval.loading import Loaded

__version__ = "0.1.0"


def load(path: Union[str, os.PathLike[str]]) -> Loaded:
    """(model, tokenizer) of a run dir, a checkpoint or an exported Hugging Face dir: gptlab.eval.loading.load,
    imported on first use, so `import gptlab` stays free of torch."""
    from gptlab.eval.loading import load as load_run

    return load_run(path)
