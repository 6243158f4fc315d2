"""A weighted mixture of corpora, given as `data.source`: {_target_: gptlab.data.mixture.Mixture, sources: {...}}.

Each entry of `sources` names one corpus (any source gptlab reads: built-in, local files, prepared shards, a
Hugging Face dataset) and its weight, the share of training windows drawn from it. Weights need not sum to 1; they
are normalised. Which source fills each training window follows the weights exactly per block of
MIXTURE_BLOCK windows, in an order drawn from data.seed (gptlab.data.mixture_windows).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

from gptlab.data.tokenizers import fingerprint
from gptlab.errors import ConfigError

FIELD = "data.source.sources"
TARGET = f"{__name__}.Mixture"  # data.source._target_ of a mixture: its epoch is data.samples_per_epoch with either
# sampling (gptlab.data.mixture_store), which the checks before the run read from the config


class Mixture:
    """Named sources with weights. A source may state the tokenizer it is meant for (`tokenizer:` beside
    `source:`); the mixture refuses to run when that is not the run's tokenizer, since a model has one vocabulary."""

    def __init__(self, sources: Mapping[str, Any]) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise ConfigError(f"{FIELD} is empty; give at least one named source with a weight, e.g. "
                              "{pydocs: {source: {_target_: gptlab.data.sources.BuiltinSource, name: pydocs}, "
                              "weight: 1.0}} (see conf/data/mixture_example.yaml); "
                              f"or drop {FIELD} to keep the data= "
                              "option's sources.")
        self.sources: dict[str, Any] = {}
        self.weights: dict[str, float] = {}
        self.tokenizers: dict[str, Any] = {}
        for name, entry in sources.items():
            self._add(str(name), entry)
        if not any(self.weights.values()):
            raise ConfigError(f"{FIELD}: every weight is 0 ({self.weights}); give at least one source a weight > 0, "
                              f"e.g. {FIELD}.{next(iter(self.weights))}.weight=1.0.")

    def _add(self, name: str, entry: Any) -> None:
        where = f"{FIELD}.{name}"
        if not isinstance(entry, Mapping) or "source" not in entry:
            raise ConfigError(f"{where} has no `source`; give {{source: <a corpus node with _target_>, weight: w}}, "
                              f"or leave {where} out.")
        unknown = set(entry) - {"source", "weight", "tokenizer"}
        if unknown:
            raise ConfigError(f"{where} has unknown keys {sorted(unknown)}; a source takes source, weight, tokenizer: "
                              f"drop {' and '.join(f'{where}.{key}' for key in sorted(unknown))}.")
        source = entry["source"]
        if source is None or not hasattr(source, "documents") or not hasattr(source, "describe"):
            raise ConfigError(f"{where}.source is {source!r}, not a corpus: give a node with _target_, e.g. "
                              "{_target_: gptlab.data.sources.BuiltinSource, name: pydocs}; "
                              f"or leave {where} out.")
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ConfigError(f"{where}.weight={weight!r} is invalid: use a finite number >= 0 (a share of the "
                              "training windows; the weights are normalised).")
        self.sources[name], self.weights[name] = source, float(weight)
        if entry.get("tokenizer") is not None:
            self.tokenizers[name] = entry["tokenizer"]

    def check_tokenizer(self, tokenizer: Any) -> None:
        """Every source's stated tokenizer must be the run's one (same ids for the same text)."""
        mine = fingerprint(tokenizer)
        for name, theirs in self.tokenizers.items():
            if fingerprint(theirs) != mine:
                raise ConfigError(
                    f"{FIELD}.{name}.tokenizer is {theirs.name!r}, but the run tokenizes with {tokenizer.name!r}: "
                    "a mixture's sources share the run's tokenizer (one vocabulary per model); drop "
                    f"{FIELD}.{name}.tokenizer, or set tokenizer= to the run tokenizer that matches it."
                )

    @property
    def name(self) -> str:
        """What the run's banner says it trains on: each source with its share of the training windows."""
        total = sum(self.weights.values())
        return "mixture of " + ", ".join(f"{name} ({weight / total:.0%})" for name, weight in self.weights.items())

    def describe(self) -> dict[str, Any]:
        return {"kind": "mixture", "sources": {name: {"weight": self.weights[name], "source": s.describe()}
                                               for name, s in self.sources.items()}}

    def documents(self) -> Iterator[str]:
        raise ConfigError("a Mixture is read source by source (data.store=memory or prepared), not as one corpus.")
