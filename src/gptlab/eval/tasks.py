"""The zero-shot tasks' data: where each lives on the Hugging Face Hub, how a local copy is read, and how a row
becomes (context, continuations). The schemas are the Hub datasets' own, so a local .jsonl holds the same rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from gptlab.errors import ConfigError
from gptlab.eval.task_rows import CHECKS


@dataclass(frozen=True)
class HubSource:
    dataset: str
    config: Optional[str]
    split: str


# Where each task's rows come from when its data is a Hub name (the datasets lm-eval uses).
HUB = {
    "lambada": HubSource("EleutherAI/lambada_openai", "default", "test"),
    "hellaswag": HubSource("Rowan/hellaswag", None, "validation"),
}
DEFAULT_DATA = {task: source.dataset for task, source in HUB.items()}


@dataclass(frozen=True)
class Example:
    context: str
    continuations: list[str]  # each scored after the context; LAMBADA has one, HellaSwag four
    label: int = 0  # index of the right continuation


def _looks_local(source: str) -> bool:
    return Path(source).exists() or source.startswith(("/", ".", "~")) or source.endswith((".json", ".jsonl"))


def _json_files(path: Path) -> list[str]:
    if path.is_dir():
        files = sorted(str(p) for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
        if not files:
            raise FileNotFoundError(f"no .json or .jsonl file in {path}")
        return files
    return [str(path)]


def load_rows(task: str, source: str, limit: Optional[int] = None, field: str = "task_data") -> list[dict[str, Any]]:
    """The first `limit` rows (all if None) of a task's data: a local .jsonl/.json file or a dir of them, else the
    Hub dataset named `source` (the task's config and split). Any failure is one ConfigError naming the task, the
    source and what to do (set `<field>.<task>`)."""
    import datasets

    field = f"{field}.{task}"
    local = _looks_local(source)
    try:
        if local:
            path = Path(source).expanduser()
            if not path.exists():
                raise FileNotFoundError(f"{path} does not exist")
            rows = datasets.load_dataset("json", data_files=_json_files(path), split="train")
        else:
            hub = HUB[task]
            config = hub.config if source == hub.dataset else None
            rows = datasets.load_dataset(source, config, split=hub.split)
    except Exception as err:  # datasets raises many types (ConnectionError, FileNotFoundError, DatasetNotFound...)
        reason = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        where = f"the local file or dir {source!r}" if local else f"the Hugging Face Hub dataset {source!r}"
        raise ConfigError(
            f"task {task!r}: could not read {where} ({type(err).__name__}: {reason}). "
            f"Give {field}=<a .jsonl file, or a dir of them, in the schema of {HUB[task].dataset}>"
            + ("" if local else "; without a network (or with HF_HUB_OFFLINE=1) only a local copy can be read") + "."
        ) from err
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    return [dict(row) for row in rows]


def lambada_example(row: dict[str, Any]) -> Example:
    """The passage minus its last word, and " " + that word (LAMBADA as in the GPT-2 paper and lm-eval)."""
    context, _, word = row["text"].rpartition(" ")
    return Example(context, [" " + word])


def _clean_hellaswag(text: str) -> str:
    """HellaSwag's WikiHow rows carry markup: " [title]" ends a heading and other [tags] mean nothing.
    The same clean-up as lm-eval's task, so accuracies compare."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag_example(row: dict[str, Any]) -> Example:
    """Context "<activity>: <ctx_a> <Ctx_b>" (rows without ctx_a/ctx_b use ctx), the four endings after a space."""
    if row.get("ctx_a") is not None:  # rows of several files share columns: an absent field reads as None
        ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    else:
        ctx = row["ctx"]
    if row.get("activity_label"):
        ctx = row["activity_label"] + ": " + ctx
    if not row["endings"]:
        raise ValueError("endings is empty")
    return Example(_clean_hellaswag(ctx), [" " + _clean_hellaswag(e) for e in row["endings"]], int(row["label"]))


def task_examples(task: str, source: str, limit: Optional[int] = None, field: str = "task_data") -> list[Example]:
    """A task's examples, read from `source` (see `load_rows`); a row missing a field is a ConfigError."""
    make = {"lambada": lambada_example, "hellaswag": hellaswag_example}[task]
    examples = []
    for i, row in enumerate(load_rows(task, source, limit, field)):
        try:
            CHECKS[task](row)
            example = make(row)
        except ConfigError as err:
            raise ConfigError(f"task {task!r}: {locate_row(source, i)}: {err} (the schema of "
                              f"{HUB[task].dataset}); fix the row, or give {field}.{task}=<another file>.") from None
        except (AttributeError, KeyError, TypeError, ValueError) as err:  # None where text belongs: AttributeError
            raise ConfigError(f"task {task!r}: {locate_row(source, i)} does not have the fields of "
                              f"{HUB[task].dataset} ({type(err).__name__}: {err}); fix the row, or give "
                              f"{field}.{task}=<another file>.") from err
        examples.append(example)
    return examples


def locate_row(source: str, index: int) -> str:
    """`<file> row <n>` (1-based, as an editor counts .jsonl lines) for the index-th row read from `source`; a
    Hub dataset or a .json array is named with the row's index."""
    path = Path(source).expanduser()
    if not _looks_local(source) or not path.exists():
        return f"{source!r} row index {index}"
    for name in _json_files(path):
        if not name.endswith(".jsonl"):
            return f"{source!r} row index {index}"
        lines = sum(1 for line in Path(name).read_text().splitlines() if line.strip())
        if index < lines:
            return f"{name} row {index + 1}"
        index -= lines
    return f"{source!r} row index {index}"
