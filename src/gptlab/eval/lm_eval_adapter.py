"""A gptlab checkpoint as an lm-evaluation-harness model (`pip install -e ".[eval]"`, lm-eval 0.4.13).

    python -m gptlab.eval.lm_eval_adapter --model_args ckpt_path=<run dir or .ckpt> --tasks lambada_openai

lm-eval knows only the models it imports itself (its registry has no plugin entry points in 0.4.13), so this
module registers "gptlab" and then runs lm-eval's own command line; every lm-eval flag works (`--model gptlab`
is added when absent). In Python: `import gptlab.eval.lm_eval_adapter` and pass `model="gptlab"` to
`lm_eval.simple_evaluate`, or an instance of `GptlabLM`.

Log-likelihoods come from gptlab.eval.scoring, the scorer of eval.py's tasks, so both give the same numbers;
generation is greedy through the model's own `generate`. model_args: ckpt_path (required), tokenizer (bytes,
gpt2, r50k_base, cl100k_base; default: the one the checkpoint was trained with), ranks_file; lm-eval's
--batch_size (a number; "auto" means 16) and --device (default: cuda if available, else mps, else cpu) apply too.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import lm_eval.models  # noqa: F401  lm-eval's own models stay known once "gptlab" is registered
import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from gptlab.checkpoint.reader import (
    check_tokenizer_fits,
    load_model,
    read_checkpoint,
    recorded_tokenizer,
    resolve_checkpoint,
)
from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer, Tokenizer
from gptlab.errors import ConfigError
from gptlab.eval.scoring import score_pairs, score_texts
from gptlab.launch.cli import user_errors_exit
from gptlab.preflight.devices import check_device, default_device
from gptlab.recorded import build_recorded

GENERATION_CHUNK = 32  # new tokens per generate() call between checks for a stop string


def checkpoint_tokenizer(hparams: dict[str, Any], source: str, name: Optional[str] = None,
                         ranks_file: Optional[str] = None) -> Tokenizer:
    """The tokenizer named by model_args, else the one recorded in the run config of the checkpoint `source`
    (a trusted class only: gptlab.recorded)."""
    if name is not None:
        return ByteTokenizer() if name == "bytes" else TiktokenTokenizer(name, ranks_file)
    recorded = recorded_tokenizer(hparams)
    if recorded is None:
        raise ConfigError("the checkpoint records no tokenizer; pass model_args tokenizer=bytes (or gpt2, r50k_base, "
                          "cl100k_base) as in the training run.")
    return build_recorded(recorded, "tokenizer", source)


def parse_batch_size(value: Any) -> int:
    """lm-eval passes --batch_size as typed: a number, or "auto"/"auto:N" (taken as 16 here: the scorer's batches
    are short and fixed-size, so there is no memory search to do)."""
    if str(value).startswith("auto"):
        return 16
    if str(value).isdigit() and int(value) > 0:
        return int(value)
    raise ConfigError(f"--batch_size={value!r} is not a positive number of requests; use e.g. --batch_size 16 or auto.")


@register_model("gptlab")
class GptlabLM(LM):
    """loglikelihood, loglikelihood_rolling and generate_until for a gptlab GPT of any variant."""

    def __init__(self, ckpt_path: Optional[str] = None, tokenizer: Optional[str] = None,
                 ranks_file: Optional[str] = None, batch_size: Any = 16, device: Optional[str] = None,
                 **_: Any) -> None:
        super().__init__()
        if not ckpt_path:
            raise ConfigError("--model_args has no ckpt_path; pass --model_args ckpt_path=<run dir or .ckpt>.")
        ckpt = resolve_checkpoint(ckpt_path)  # a run dir: its newest checkpoint that loads
        self.model, hparams = load_model(ckpt)
        self.tokenizer = checkpoint_tokenizer(hparams, str(ckpt), tokenizer, ranks_file)
        check_tokenizer_fits(self.tokenizer, self.model, "tokenizer")
        self._device = check_device("--device", device or default_device())
        self.model.to(self._device).eval()
        self.batch_size = parse_batch_size(batch_size)

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        scores = score_texts(self.model, self.tokenizer, [tuple(r.args) for r in requests], self.batch_size)
        return [(s.logprob, s.greedy) for s in scores]

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Each text's log-likelihood after end-of-text, in windows of block_size tokens, each token scored once
        with as much context as fits (lm-eval's rolling windows)."""
        block, eot = self.model.config.block_size, self.tokenizer.eot_id
        owners, pairs = [], []
        for i, request in enumerate(requests):
            for window in get_rolling_token_windows(self.tokenizer.encode(request.args[0]), eot, block, 1):
                context, continuation = make_disjoint_window(window)
                owners.append(i)
                pairs.append((list(context), list(continuation)))
        totals = [0.0] * len(requests)
        for i, score in zip(owners, score_pairs(self.model, pairs, self.batch_size)):
            totals[i] += score.logprob
        return totals

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, one request at a time (the model takes no left padding), cut before the first
        stop string of `until` and at end-of-text, at most `max_gen_toks` tokens."""
        return [self._generate(context, dict(kwargs)) for context, kwargs in (r.args for r in requests)]

    def _generate(self, context: str, kwargs: dict[str, Any]) -> str:
        until = kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_new = int(kwargs.get("max_gen_toks", 256))
        ids = self.tokenizer.encode(context) or [self.tokenizer.eot_id]
        idx = torch.tensor([ids[-self.model.config.block_size:]], device=self._device)
        new: list[int] = []
        text = ""
        while len(new) < max_new:
            out = self.model.generate(idx, min(GENERATION_CHUNK, max_new - len(new)), temperature=0.0,
                                      eos_token_id=self.tokenizer.eot_id)
            chunk = out[0, idx.shape[1]:].tolist()
            ended = self.tokenizer.eot_id in chunk
            new += chunk[:chunk.index(self.tokenizer.eot_id)] if ended else chunk
            text = self.tokenizer.decode(new)
            if ended or any(stop in text for stop in until):
                break
            idx = out
        cut = min((text.index(stop) for stop in until if stop in text), default=len(text))
        return text[:cut]


@user_errors_exit  # a bad ckpt_path or tokenizer is one message, exit 2
def main(argv: Optional[list[str]] = None) -> None:
    """lm-eval's command line with this module's "gptlab" model registered."""
    from lm_eval.__main__ import cli_evaluate

    args = list(sys.argv[1:] if argv is None else argv)
    if "--model" not in args:
        args += ["--model", "gptlab"]
    if not any(a == "--device" or a.startswith("--device=") for a in args):
        args += ["--device", default_device()]  # lm-eval's own default is cuda:0, also on a machine without one
    sys.argv = [sys.argv[0], *args]
    if option(args, "--model") == "gptlab":
        check_before_tasks(args)
    try:
        cli_evaluate()
    except ValueError as err:  # lm-eval's user errors that are not its own message-and-exit: --tasks unknown or none
        if str(err).startswith("No tasks specified"):
            raise ConfigError("no --tasks given; pass --tasks <name>[,<name>...], e.g. --tasks lambada_openai "
                              "(`lm-eval ls tasks` lists the tasks lm-eval knows).") from err
        if not str(err).startswith("Tasks not found"):
            raise
        raise ConfigError(f"--tasks: {err}; `lm-eval ls tasks` lists the tasks lm-eval knows.") from err
    except ConnectionError as err:  # a task's dataset is on the Hugging Face Hub, and this machine cannot reach it
        raise ConfigError(f"--tasks: a task's dataset cannot be downloaded ({err}); without a network, run tasks "
                          "whose data is on this machine: --include_path <a dir of their YAML files> --tasks "
                          "<their names>.") from err


def option(args: list[str], flag: str) -> Optional[str]:
    """The last value given to `flag` (`--flag value` or `--flag=value`), as lm-eval's argparse reads it."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def check_before_tasks(args: list[str]) -> None:
    """The device and the checkpoint, checked before lm-eval indexes its thousands of task files (half a minute):
    a mistyped --device or ckpt_path is told at once. GptlabLM checks them again where lm-eval builds it."""
    check_device("--device", option(args, "--device"))
    model_args = dict(pair.split("=", 1) for pair in (option(args, "--model_args") or "").split(",") if "=" in pair)
    if model_args.get("ckpt_path"):
        read_checkpoint(resolve_checkpoint(model_args["ckpt_path"]), mmap=True)  # mapped: its weights stay on disk


if __name__ == "__main__":
    main()
