"""Zero-shot LAMBADA and HellaSwag, as in the GPT-2 and GPT-3 papers, for any gptlab GPT.

Metrics (keys `<task>/<metric>`):
- lambada/acc: share of passages whose last word the model continues greedily: the argmax at every token of
  " " + last word, given the passage before it, is that token.
- lambada/ppl: per-token perplexity of the last word, exp(total NLL / total target tokens) (GPT-2 paper).
- lambada/word_ppl: per-word perplexity, exp(mean over passages of the word's summed NLL); lm-eval's `perplexity`.
- hellaswag/acc: share of items whose right ending has the highest summed log-probability.
- hellaswag/acc_norm: the same with each sum divided by the ending's length in characters (without the space
  before it), as lm-eval's acc_norm.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

from gptlab.data.tokenizers import Tokenizer
from gptlab.errors import ConfigError, is_int
from gptlab.eval.scoring import BatchHook, encode_pair, score_texts
from gptlab.eval.tasks import DEFAULT_DATA, Example, task_examples
from gptlab.model import GPT

TASKS = tuple(DEFAULT_DATA)


def check_tasks(tasks: Sequence[str], field: str = "tasks") -> list[str]:
    """The task names as a list; an unknown one is a ConfigError listing the known tasks."""
    if isinstance(tasks, str):
        tasks = [tasks]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        example = f" (e.g. {field}=[{next(iter(TASKS))}])" if field.endswith("tasks") else ""
        raise ConfigError(f"{field}={list(tasks)} has unknown task(s) {unknown}; the known tasks are: "
                          f"{', '.join(TASKS)}{example}.")
    return list(tasks)


def load_examples(tasks: Sequence[str], data: Optional[Mapping[str, str]] = None, limit: Optional[int] = None,
                  field: str = "task_data", limit_field: str = "task_limit") -> dict[str, list[Example]]:
    """Each task's examples from `data[task]` (a Hub dataset name or a local path; default or null: the Hub dataset).
    `field` and `limit_field` are the config keys of `data` and `limit`, for the error messages."""
    if limit is not None and not (is_int(limit) and limit >= 1):
        raise ConfigError(f"{limit_field}={limit!r} must be a positive number of examples, or null for all; use e.g. "
                          f"{limit_field}=100, or {limit_field}=null.")
    data = {**DEFAULT_DATA, **{task: d for task, d in (data or {}).items() if d is not None}}  # null: the Hub's
    return {task: task_examples(task, str(data[task]), limit, field) for task in check_tasks(tasks)}


def check_fits(examples: Mapping[str, Sequence[Example]], tokenizer: Tokenizer, block_size: int, field: str,
               instead: str) -> None:
    """Every continuation fits the model's context (scoring refuses one that does not, with no row to name: in a
    training run, at the first zero-shot step, after hours), checked before anything is scored. `field` is the
    config key of the task files, `instead` what else the user can change (train: the context)."""
    for task, rows in examples.items():
        for number, example in enumerate(rows, start=1):
            longest = max(len(encode_pair(tokenizer, example.context, ending)[1]) for ending in example.continuations)
            if longest > block_size:
                raise ConfigError(
                    f"{task} example {number} ({field}.{task}) has a continuation of {longest} tokens, longer than "
                    f"the model's context ({block_size} tokens), so no context fits before it: give "
                    f"{field}.{task}=<a file whose continuations fit> (e.g. without that row){instead}.")


def lambada_metrics(model: GPT, tokenizer: Tokenizer, examples: Sequence[Example],
                    batch_size: int = 16, before_batch: BatchHook = None) -> dict[str, float]:
    requests = [(ex.context, ex.continuations[0]) for ex in examples]
    scores = score_texts(model, tokenizer, requests, batch_size, before_batch)
    nll = -sum(s.logprob for s in scores)
    return {
        "acc": sum(s.greedy for s in scores) / len(scores),
        "ppl": math.exp(nll / sum(s.n_tokens for s in scores)),
        "word_ppl": math.exp(nll / len(scores)),
    }


def hellaswag_metrics(model: GPT, tokenizer: Tokenizer, examples: Sequence[Example],
                      batch_size: int = 16, before_batch: BatchHook = None) -> dict[str, float]:
    requests = [(ex.context, ending) for ex in examples for ending in ex.continuations]
    scores = iter(score_texts(model, tokenizer, requests, batch_size, before_batch))
    right = right_norm = 0
    for ex in examples:
        lps = [next(scores).logprob for _ in ex.continuations]
        # characters of the ending itself: the continuation minus the one space put before it (lm-eval's length)
        norm = [lp / max(len(ending) - 1, 1) for lp, ending in zip(lps, ex.continuations)]
        right += max(range(len(lps)), key=lps.__getitem__) == ex.label
        right_norm += max(range(len(norm)), key=norm.__getitem__) == ex.label
    return {"acc": right / len(examples), "acc_norm": right_norm / len(examples)}


METRICS = {"lambada": lambada_metrics, "hellaswag": hellaswag_metrics}


def evaluate_tasks(model: GPT, tokenizer: Tokenizer, examples: Mapping[str, Sequence[Example]],
                   batch_size: int = 16, before_batch: BatchHook = None) -> dict[str, float]:
    """`<task>/<metric>` for every task, plus `<task>/n`, the number of examples scored (on the model's device).
    `before_batch` runs before each scoring batch (see gptlab.eval.scoring)."""
    results: dict[str, float] = {}
    for task, items in examples.items():
        if not items:
            raise ConfigError(f"task {task!r} has no examples; check task_data.{task}.")
        metrics = METRICS[task](model, tokenizer, items, batch_size, before_batch)
        results |= {f"{task}/{name}": value for name, value in metrics.items()} | {f"{task}/n": len(items)}
    return results


def format_table(results: Mapping[str, float]) -> str:
    """One line per task: its metrics and the number of examples."""
    tasks = dict.fromkeys(key.split("/")[0] for key in results)
    lines = [f"{'task':<10} {'n':>6}  metrics"]
    for task in tasks:
        metrics = [f"{k.split('/', 1)[1]} {v:.4f}" for k, v in results.items()
                   if k.startswith(task + "/") and not k.endswith("/n")]
        lines.append(f"{task:<10} {int(results[task + '/n']):>6}  " + "  ".join(metrics))
    return "\n".join(lines)
