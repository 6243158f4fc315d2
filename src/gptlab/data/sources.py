"""Corpora: where documents come from. Each source yields document texts in a fixed order and can also
hand out a `datasets.IterableDataset` with a "text" column for the streaming path.

Built-in corpora ship with every Python; `TextFiles` reads local .txt/.jsonl/.parquet; `HFDataset` is any
Hugging Face dataset (or a local file through the "text"/"json"/"parquet" builders).
"""

from __future__ import annotations

import glob
import json
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from gptlab.errors import ConfigError, invalid_choice


class DecodeStats:
    """Counts characters replaced because the input was not valid UTF-8, and names the first places (a file, a
    JSONL line): all of them would be a list as long as the corpus."""

    NAMED = 100

    def __init__(self) -> None:
        self.replaced_chars = 0
        self.places = 0
        self.files: list[str] = []

    def decode(self, data: bytes, where: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
            # U+FFFD that were already in the input are not counted as replacements.
            self.replaced_chars += text.count("\ufffd") - data.count("\ufffd".encode("utf-8"))
            self.places += 1
            if len(self.files) < self.NAMED:
                self.files.append(where)
            return text


def pydocs_documents() -> Iterator[tuple[str, str]]:
    """The stdlib's documentation topics (`pydoc_data.topics`, ~465 KB of English prose)."""
    from pydoc_data.topics import topics

    for key in sorted(topics):
        yield key, topics[key]


def stdlib_files() -> list[Path]:
    """The standard library's own .py files (~30 MB), third-party packages excluded, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return [p for p in sorted(root.rglob("*.py")) if "site-packages" not in p.relative_to(root).parts]


def python_stdlib_documents(stats: Optional[DecodeStats] = None) -> Iterator[tuple[str, str]]:
    stats = stats or DecodeStats()
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in stdlib_files():
        rel = str(path.relative_to(root))
        yield rel, stats.decode(path.read_bytes(), rel)  # a few test modules are Latin-1 on purpose


SOURCES = {"pydocs": pydocs_documents, "python_stdlib": python_stdlib_documents}


def _plain_texts(ds) -> Iterator[str]:
    for record in ds:
        yield record["text"]


def _generator_dataset(gen, files: list[str]):
    """A streaming dataset over our own reader, one datasets shard per file so ranks and workers split it."""
    import datasets

    return datasets.IterableDataset.from_generator(gen, gen_kwargs={"files": files})


class BuiltinSource:
    """`pydocs` or `python_stdlib`: corpora that ship with every Python."""

    def __init__(self, name: str) -> None:
        if name not in SOURCES:
            raise invalid_choice("data.source.name", name, SOURCES)
        self.name = name
        self.stats = DecodeStats()
        self.bytes_read = 0  # of the UTF-8 texts (pydocs) or the files (python_stdlib): the progress bar's count

    def describe(self) -> dict[str, Any]:
        return {"kind": "builtin", "name": self.name, "python": sys.version.split()[0]}

    def size_bytes(self) -> int:
        if self.name == "pydocs":
            return sum(len(text.encode("utf-8")) for _, text in pydocs_documents())
        return sum(p.stat().st_size for p in stdlib_files())

    def documents(self) -> Iterator[str]:
        self.bytes_read = 0
        if self.name == "pydocs":
            for _, text in pydocs_documents():
                self.bytes_read += len(text.encode("utf-8"))
                yield text
            return
        root = Path(sysconfig.get_paths()["stdlib"])
        for rel, text in python_stdlib_documents(self.stats):
            self.bytes_read += (root / rel).stat().st_size
            yield text

    def streaming_dataset(self):
        """python_stdlib streams one datasets shard per file, so ranks and workers can share it out."""
        if self.name == "pydocs":
            return _generator_dataset(lambda files: ({"text": t} for t in self.documents()), [self.name])
        root = Path(sysconfig.get_paths()["stdlib"])

        def gen(files: list[str]):
            for path in files:
                yield {"text": self.stats.decode(Path(path).read_bytes(), str(Path(path).relative_to(root)))}

        return _generator_dataset(gen, [str(p) for p in stdlib_files()])

    texts = staticmethod(_plain_texts)


def matching_files(key: str, pattern: str) -> list[str]:
    """The files a path or glob (** recurses) matches, sorted; none is an error naming `key`."""
    matches = [m for m in sorted(glob.glob(str(Path(pattern).expanduser()), recursive=True)) if Path(m).is_file()]
    if not matches:
        raise ConfigError(f"{key}: {pattern!r} matches no file (paths are relative to the launch dir, {Path.cwd()}); "
                          f"give files or globs that exist: {key}=<list>.")
    return matches


_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
PARQUET_ROWS = 1024  # rows read at once from a Parquet file


class TextFiles:
    """Local files, given as paths or globs: each .txt file is one document, each .jsonl line and .parquet
    row is one document (its `text_field`)."""

    def __init__(self, paths: Sequence[str] | str, text_field: str = "text", name: str = "text_files") -> None:
        self.patterns = [paths] if isinstance(paths, str) else list(paths or [])
        self.text_field, self.name = text_field, name
        self.stats = DecodeStats()
        self.bytes_read = 0  # of the files, as documents() reads them: the progress bar's count
        if not self.patterns:
            raise ConfigError("data.source.paths is empty; give your files or globs as data.source.paths=<list>, e.g. "
                              "data.source.paths='[corpus/*.txt,more/*.jsonl]'.")

    def files(self) -> list[str]:
        found: list[str] = []
        for pattern in self.patterns:
            matches = matching_files("data.source.paths", pattern)
            for m in matches:
                if Path(m).suffix not in _BUILDERS:
                    raise ConfigError(
                        f"data.source.paths: {m!r} is not one of {', '.join(_BUILDERS)}; convert it or drop it."
                    )
            found.extend(matches)
        return found

    def describe(self) -> dict[str, Any]:
        return {"kind": "text_files", "files": self.files(), "text_field": self.text_field}

    def size_bytes(self) -> int:
        return sum(Path(f).stat().st_size for f in self.files())

    def documents(self) -> Iterator[str]:
        self.bytes_read = 0
        for path in self.files():
            done = self.bytes_read + Path(path).stat().st_size
            yield from self._read(path)
            self.bytes_read = done  # exact at each file's end, whatever the format counted inside it

    def _read(self, path: str) -> Iterator[str]:
        """A .txt file is one document and is read whole; JSONL by line and Parquet by small row batches, so
        memory holds a few documents, never a file."""
        suffix = Path(path).suffix
        if suffix == ".txt":
            yield self.stats.decode(Path(path).read_bytes(), path)
        elif suffix == ".parquet":
            yield from self._read_parquet(path)
        else:
            with open(path, "rb") as f:
                for lineno, line in enumerate(f, 1):
                    self.bytes_read += len(line)
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(self.stats.decode(line, f"{path}:{lineno}"))
                    except json.JSONDecodeError as err:
                        raise ConfigError(f"{path}:{lineno} is not valid JSON ({err}); fix or drop that line.") from err
                    if not isinstance(record, dict) or self.text_field not in record:
                        keys = list(record) if isinstance(record, dict) else type(record).__name__
                        raise self._missing_field(f"{path}:{lineno}", keys)
                    if record[self.text_field] is not None:
                        yield self._text(record[self.text_field], f"{path}:{lineno}")

    def _read_parquet(self, path: str) -> Iterator[str]:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)
        if self.text_field not in table.schema_arrow.names:
            raise self._missing_field(path, table.schema_arrow.names)
        per_row = Path(path).stat().st_size / max(table.metadata.num_rows, 1)
        # pyarrow's default batch is 65,536 rows: gigabytes of web documents at once (it still decodes a row group).
        for batch in table.iter_batches(batch_size=PARQUET_ROWS, columns=[self.text_field]):
            self.bytes_read += int(per_row * batch.num_rows)  # compressed: the file's bytes shared out by row
            yield from (self._text(t, path) for t in batch.column(0).to_pylist() if t is not None)

    def _text(self, value: Any, where: str) -> str:
        """A document's text; a number, list or object in the text field is refused where it is."""
        if not isinstance(value, str):
            raise ConfigError(f"{where}: field {self.text_field!r} holds {type(value).__name__} {str(value)[:40]!r}, "
                              "not text; fix that record, or set data.source.text_field to the field that holds the "
                              "document text.")
        return value

    def _missing_field(self, where: str, keys: Any) -> ConfigError:
        return ConfigError(
            f"{where} has no field {self.text_field!r} (it has: {keys}); set data.source.text_field to the field "
            "that holds the document text."
        )

    def streaming_dataset(self):
        """Our reader behind a streaming `datasets.IterableDataset`, one shard per file: `datasets`' json builder
        fails on non-UTF-8 bytes, while this reader replaces and counts them."""

        def gen(files: list[str]):
            for path in files:
                for text in self._read(path):
                    yield {"text": text}

        return _generator_dataset(gen, self.files())

    texts = staticmethod(_plain_texts)


class HFDataset:
    """Any Hugging Face dataset by name (`path`, config `name`, `split`, `text_field`), streamed so that nothing
    is copied to disk first. Local files work the same way with path=text|json|parquet and `data_files`."""

    def __init__(
        self,
        path: str,
        name: Optional[str] = None,
        split: str = "train",
        text_field: str = "text",
        data_files: Any = None,
        builder_kwargs: Optional[dict[str, Any]] = None,
    ) -> None:
        if not path:
            raise ConfigError("data.source.path is not set; give a Hub dataset (e.g. roneneldan/TinyStories), or a "
                              "builder (text | json | parquet) with your files: `data.source.path=json "
                              "data.source.data_files=[corpus/*.jsonl]`.")
        self.path, self.config_name, self.split, self.text_field = path, name, split, text_field
        if isinstance(data_files, Mapping):
            data_files = {k: list(v) if not isinstance(v, str) else v for k, v in data_files.items()}
        elif data_files is not None and not isinstance(data_files, str):
            data_files = list(data_files)
        self.data_files = data_files
        self.builder_kwargs = dict(builder_kwargs or {})
        self.stats = DecodeStats()
        self.name = path

    def describe(self) -> dict[str, Any]:
        return {"kind": "hf", "path": self.path, "name": self.config_name, "split": self.split,
                "text_field": self.text_field, "data_files": self.data_files, "builder_kwargs": self.builder_kwargs}

    def _what(self) -> str:
        return f"Hugging Face dataset {self.path!r} (name={self.config_name!r}, split={self.split!r})"

    def _unreachable(self, err: Exception) -> ConfigError:
        return ConfigError(
            f"could not load the {self._what()}: {type(err).__name__}: {str(err)[:300]}. If this machine is offline, "
            "download the data where the Hub is reachable and train from the files with data=text_files "
            "data.source.paths=[...], or fill the HF cache and set HF_HUB_OFFLINE=1; also check the dataset name, "
            "config and split."
        )

    def _check_hub(self) -> None:
        """Fail in seconds, not after `datasets`' half minute of retries, when the Hub cannot be reached."""
        import socket
        from urllib.parse import urlparse

        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE or self.data_files is not None or Path(self.path).exists():
            return  # offline by choice, a builder over given files, or a local dataset directory
        host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
        try:
            socket.create_connection((host, 443), timeout=10).close()
        except OSError as err:
            raise self._unreachable(ConnectionError(f"{host} is unreachable: {err}")) from err

    def _check_local_files(self) -> None:
        """Local data_files that match nothing: `datasets` would stop with a bare StopIteration (json) or worse."""
        given = self.data_files.values() if isinstance(self.data_files, Mapping) else [self.data_files]
        for patterns in given:
            for pattern in [patterns] if isinstance(patterns, str) else patterns or []:
                if "://" not in pattern:
                    matching_files("data.source.data_files", pattern)

    def streaming_dataset(self):
        import datasets

        self._check_hub()
        self._check_local_files()
        try:
            ds = datasets.load_dataset(self.path, self.config_name, split=self.split, data_files=self.data_files,
                                       streaming=True, **self.builder_kwargs)
        except (ConnectionError, OSError, ValueError) as err:  # unreachable Hub, missing files, unknown split
            raise self._unreachable(err) from err
        if ds.column_names is not None and self.text_field not in ds.column_names:
            raise self._missing_field(ds.column_names)
        return ds.map(self._pick)  # column names of JSON files are only known once read: checked per record

    def _pick(self, record: dict[str, Any]) -> dict[str, Any]:
        if self.text_field not in record:
            raise self._missing_field(list(record))
        return {"text": record[self.text_field]}

    def _missing_field(self, columns: Any) -> ConfigError:
        return ConfigError(
            f"the {self._what()} has no column {self.text_field!r} (it has: {columns}); set data.source.text_field."
        )

    def documents(self) -> Iterator[str]:
        return self.texts(self.streaming_dataset())

    def texts(self, ds) -> Iterator[str]:
        """The texts of (a split of) `streaming_dataset()`, with read errors turned into messages."""
        try:
            for record in ds:
                if record["text"] is not None:
                    yield record["text"]
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"the {self._what()} holds bytes that are not UTF-8 ({err}); for local files use data=text_files, "
                "which replaces and counts them."
            ) from err
        except (ConnectionError, OSError) as err:
            raise self._unreachable(err) from err
