"""A nested config as flat dotted keys: how TensorBoard's HParams tab and the sweep-job comparisons see a run."""

from __future__ import annotations

from typing import Any, Iterator, Mapping


def flatten(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """`{"model": {"n_layer": 4}}` -> `("model.n_layer", 4)`; what TensorBoard cannot show becomes a string."""
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        elif key != "_partial_":
            yield name, value if isinstance(value, (bool, int, float, str)) else str(value)
