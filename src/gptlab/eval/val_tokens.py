"""Whether eval.py scores the validation tokens a checkpoint's run scored, and if not, the overrides that would.

val/loss is a token mean, the same at any batch size or number of ranks (train/source_metrics.py). It still depends
on which tokens are scored: the corpus and its split (data.source, data.val_fraction, data.document_masking), the
window length (the model's context), a streamed corpus's data.val_windows, and a trainer.limit_val_batches below
the whole set (a count or a fraction of batches, whose windows data.batch_size then decides). eval.yaml's defaults are
training's, so a run on the built-in corpus with the default validation is reproduced with no override."""

from __future__ import annotations

from typing import Any, Mapping, Optional

# data keys that change which tokens validation scores (block_size is the model's, read from the checkpoint). Every
# store splits a corpus into one val set, except that a streamed one scores only its first data.val_windows windows.
SCORED_DATA_KEYS = ("source", "val_fraction", "document_masking")
STREAMED_KEYS = ("store", "val_windows")


def _differences(prefix: str, recorded: Any, now: Any) -> list[str]:
    """key=value overrides (as Hydra takes them) that turn `now` into `recorded`, key by key for nested values."""
    if isinstance(recorded, Mapping) and isinstance(now, Mapping):
        return [o for k, v in recorded.items() for o in _differences(f"{prefix}.{k}", v, now.get(k))]
    if recorded == now:
        return []
    text = "null" if recorded is None else str(recorded).lower() if isinstance(recorded, bool) else str(recorded)
    return [f"{prefix}={text}"]


def overrides_to_reproduce(run: Optional[Mapping[str, Any]], data: Mapping[str, Any],
                           trainer: Mapping[str, Any]) -> Optional[list[str]]:
    """The overrides eval needs to score the tokens the run validated on: [] when it already does, None when the
    checkpoint does not record its run (nothing to compare)."""
    if not run or "data" not in run or "trainer" not in run:
        return None
    recorded, wanted = run["data"], []
    streamed = "streaming" in (recorded.get("store"), data.get("store"))
    for key in SCORED_DATA_KEYS + (STREAMED_KEYS if streamed else ()):
        if key in recorded:
            wanted += _differences(f"data.{key}", recorded[key], data.get(key))
    limit, now = run["trainer"].get("limit_val_batches", 1.0), trainer.get("limit_val_batches", 1.0)
    if _whole(limit):
        if not _whole(now):
            wanted.append("trainer.limit_val_batches=1.0")
    elif limit != now or recorded.get("batch_size") != data.get("batch_size"):
        # a count of batches, or a fraction of their number: the same windows need the same batch size too
        wanted += [f"trainer.limit_val_batches={limit}", f"data.batch_size={recorded.get('batch_size')}"]
    return wanted


def _whole(limit: Any) -> bool:
    """trainer.limit_val_batches that scores every val window (1.0, or a fraction above it)."""
    return isinstance(limit, float) and limit >= 1.0
