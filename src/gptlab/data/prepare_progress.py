"""The preparation's progress bar: bytes of the input read, against the input's size where the source knows it.

The ETA is tqdm's: the bytes left divided by its smoothed rate of bytes read (an exponential moving average), so it
assumes the rest of the input reads and tokenizes at the recent pace. Tokens are only known once tokenized, so they
cannot give a total; the bar shows their rate, tokens written by this run over its elapsed time (a resumed run's
rate is its own, the documents read past on resume count neither as tokens nor in the byte rate).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional


class ReadCounter:
    """How far into its input a source is. Local sources count the bytes of the files they read (`bytes_read`,
    `size_bytes()`); for any other (a streamed Hugging Face dataset) the UTF-8 bytes of its texts are counted
    here, and there is no total."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.total: Optional[int] = source.size_bytes() if hasattr(source, "size_bytes") else None
        self._texts = 0

    def documents(self) -> Iterator[str]:
        if hasattr(self.source, "bytes_read"):
            yield from self.source.documents()
            return
        for text in self.source.documents():
            self._texts += len(text.encode("utf-8"))
            yield text

    @property
    def read(self) -> int:
        return getattr(self.source, "bytes_read", self._texts)


class PrepareBar:
    def __init__(self, desc: str, total: Optional[int], initial: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(desc=desc, total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                        disable=not enabled, dynamic_ncols=True)
        self.tokens = 0

    def update(self, read: int, tokens: int) -> None:
        if self.bar.disable:
            return
        self.tokens += tokens
        rate = self.tokens / max(self.bar.format_dict["elapsed"], 1e-9)
        self.bar.set_postfix_str(f"{self.bar.format_sizeof(rate)} tok/s, {self.bar.format_sizeof(self.tokens)} tok",
                                 refresh=False)
        self.bar.update(read - self.bar.n)

    def close(self) -> None:
        self.bar.close()
