"""One checkpoint's scores at several contexts, as files: context_eval.json (what a report reads), a CSV of the loss
by position, and its PNG. Each file is written whole (gptlab.atomic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gptlab.atomic import atomic_write_text
from gptlab.eval.context_plot import plot_loss_by_position
from gptlab.eval.extrapolation import ContextScore

RESULTS_FILE = "context_eval.json"
POSITIONS_CSV = "loss_by_position.csv"
POSITIONS_PNG = "loss_by_position.png"
PROTOCOL = ("non-overlapping windows of each context over the same span of validation targets; loss = summed NLL / "
            "targets (a token mean); loss_by_position[L][p] = mean NLL at position p over the windows of L")


def results_record(scored: dict[str, Any], pos_emb: str, trained: int, scores: list[ContextScore],
                   refused: dict[int, str]) -> dict[str, Any]:
    """The JSON object of context_eval.json; a refused context holds its reason instead of a loss. `scored` says
    what was scored (checkpoint, data, contexts, scored_targets): a sweep scored again keeps a job's results only
    when it is the same."""
    contexts: dict[str, Any] = {str(s.context): {"loss": s.loss, "ppl": s.ppl, "windows": s.windows,
                                                 "tokens": s.tokens} for s in scores}
    contexts |= {str(c): {"refused": why} for c, why in refused.items()}
    return {"scored": scored, "pos_emb": pos_emb, "trained_context": trained,
            "scored_targets": scored["scored_targets"], "protocol": PROTOCOL,
            "contexts": dict(sorted(contexts.items(), key=lambda kv: int(kv[0]))),
            "loss_by_position": {str(s.context): s.by_position for s in scores}}


def positions_csv(scores: list[ContextScore]) -> str:
    """position, then the mean NLL at that position for each context (empty past a context's end)."""
    longest = max(s.context for s in scores)
    lines = ["position," + ",".join(f"loss@{s.context}" for s in scores)]
    for p in range(longest):
        lines.append(f"{p}," + ",".join(f"{s.by_position[p]:.6f}" if p < s.context else "" for s in scores))
    return "\n".join(lines) + "\n"


def write_results(directory: Path, record: dict[str, Any], scores: list[ContextScore], title: str) -> list[Path]:
    """context_eval.json, and the CSV and PNG of the loss by position when a context was scored."""
    written = [directory / RESULTS_FILE]
    atomic_write_text(written[0], json.dumps(record, indent=2) + "\n")
    if scores:
        atomic_write_text(directory / POSITIONS_CSV, positions_csv(scores))
        curves = {s.context: s.by_position for s in scores}
        plot_loss_by_position({title: (curves, record["trained_context"])}, directory / POSITIONS_PNG,
                              "loss by position in the window")
        written += [directory / POSITIONS_CSV, directory / POSITIONS_PNG]
    return written


def read_results(path: Path) -> dict[str, Any]:
    """A context_eval.json; ValueError when it is not one (the report names the file and the way out)."""
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or not isinstance(record.get("contexts"), dict):
        raise ValueError("no contexts object")
    return record
