"""Corpora as iterables of (document id, text); built-in ones ship with every Python."""

from __future__ import annotations

from typing import Iterator


def pydocs_documents() -> Iterator[tuple[str, str]]:
    """The stdlib's documentation topics (`pydoc_data.topics`, ~465 KB of English prose)."""
    from pydoc_data.topics import topics

    for key in sorted(topics):
        yield key, topics[key]


SOURCES = {"pydocs": pydocs_documents}
