"""Prepare a corpus once into train/val token shards plus a manifest, and open them again safely.

Documents are split by the rule of gptlab.data.split (a hash of their text, the same for every store),
tokenized in parallel in a fixed order, joined with end-of-text and cut into shards at fixed batch
boundaries: the output is byte-identical run to run. Each
shard is renamed into place whole, and `progress.json` records the batches already written, so a run killed
midway resumes where it stopped; `manifest.json` is written last and marks the directory complete.
"""

from __future__ import annotations

import json
import logging
from contextlib import closing
from itertools import islice
from pathlib import Path
from typing import Any

from gptlab.atomic import atomic_write_text, remove_stale_temp_files
from gptlab.data.prepare_progress import PrepareBar, ReadCounter
from gptlab.data.ranks import sha256_file
from gptlab.data.shard_writer import PROGRESS, ShardWriter
from gptlab.data.shards import HEADER_BYTES, ShardedTokens, open_shard, read_header, token_dtype
from gptlab.data.source_files import changes, file_identity
from gptlab.data.split import SPLITS, check_splits_filled, check_val_fraction, doc_batches, encode_batches
from gptlab.data.tokenizers import Tokenizer, fingerprint
from gptlab.dir_lock import release, wait_lock
from gptlab.errors import ConfigError
from gptlab.signals import stop_if_signalled

log = logging.getLogger(__name__)

FORMAT = 1
LOCK_FILE = ".gptlab.lock"  # held by the one process preparing the cache (gptlab.dir_lock); others wait
SOURCE_FILES = "source_files"  # key of the manifest: data.source_files.file_identity


def tokenizer_identity(tokenizer: Tokenizer) -> dict[str, Any]:
    return {"name": tokenizer.name, "vocab_size": tokenizer.vocab_size, "eot_id": tokenizer.eot_id,
            "fingerprint": fingerprint(tokenizer)}


def read_json(path: Path) -> dict[str, Any]:
    """A manifest's contents; a truncated or hand-edited file is a ConfigError naming it, not a JSON traceback."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(
            f"{path} is not valid JSON ({err}): it is truncated or was edited by hand. Delete {path.parent} and "
            "run `python scripts/prepare_data.py` with the same data and tokenizer to rebuild it."
        ) from err
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path} holds {type(data).__name__}, not a manifest; delete {path.parent} and prepare again."
        )
    return data


def prepared_dir(cache_dir: str | Path, tokenizer: Tokenizer) -> Path:
    return Path(cache_dir) / tokenizer.name


def _mismatch(path: Path, found: dict, wanted: dict) -> ConfigError:
    diff = {k: (found.get(k), wanted.get(k)) for k in wanted if found.get(k) != wanted.get(k)}
    lines = "; ".join(f"{k}: prepared {a!r}, config {b!r}" for k, (a, b) in diff.items())
    return ConfigError(
        f"{path} was prepared with different settings ({lines}). Use the matching config, point data.cache_dir "
        "elsewhere, or delete that directory to prepare again."
    )


def prepare(
    source: Any,
    tokenizer: Tokenizer,
    cache_dir: str | Path,
    val_fraction: float = 0.01,
    shard_tokens: int = 100_000_000,
    num_proc: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Tokenize `source` into shards under cache_dir/<tokenizer name>/ unless a matching manifest is there."""
    check_val_fraction(val_fraction)
    if shard_tokens < 1 or num_proc < 1:
        raise ConfigError(f"data.shard_tokens={shard_tokens} and data.num_proc={num_proc} must be >= 1.")
    out = prepared_dir(cache_dir, tokenizer)
    key = {"format": FORMAT, "source": source.describe(), "tokenizer": tokenizer_identity(tokenizer),
           "val_fraction": val_fraction, "shard_tokens": shard_tokens}
    files = file_identity(source)
    done = _complete(out, key, files)
    if done is not None:  # nothing to write (a read-only cache too): no lock
        return done
    created = [d for d in (out, *out.parents) if not d.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    lock = wait_lock(out / LOCK_FILE, lambda holder: log.warning(
        "%s is being prepared by another process (%s); waiting for it to finish", out, holder),
        poll=lambda: stop_if_signalled(f"waiting for another process to prepare {out}"))
    try:
        manifest = _prepare_locked(out, key, files, source, tokenizer, val_fraction, shard_tokens, num_proc, progress)
    except BaseException:
        release(lock)
        for directory in created:  # the dirs this run made, while nothing is in them (progress.json resumes a run)
            try:
                directory.rmdir()
            except OSError:
                break
        raise
    release(lock)
    return manifest


def _found(out: Path, key: dict[str, Any], files: Any) -> tuple[dict[str, Any] | None, list[str], list[str]]:
    """The cache's manifest (None: none yet), the source files changed since, and its shards not there whole."""
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        return None, [], []
    manifest = read_json(manifest_path)
    if {k: manifest.get(k) for k in key} != key:
        raise _mismatch(manifest_path, manifest, key)
    return manifest, changes(manifest.get(SOURCE_FILES), files), missing_shards(out, manifest)


def _complete(out: Path, key: dict[str, Any], files: Any) -> dict[str, Any] | None:
    """The manifest of a cache prepared whole with these settings from these files (None: there is work)."""
    manifest, changed, missing = _found(out, key, files)
    return manifest if manifest and not changed and not missing and not (out / PROGRESS).exists() else None


def _prepare_locked(out: Path, key: dict[str, Any], files: Any, source: Any, tokenizer: Tokenizer,
                    val_fraction: float, shard_tokens: int, num_proc: int, progress: bool) -> dict[str, Any]:
    """`prepare`'s work, by the one process that holds the cache's lock: another may have finished it meanwhile."""
    manifest, changed, missing = _found(out, key, files)
    if manifest is not None:
        if not changed and not missing:
            (out / PROGRESS).unlink(missing_ok=True)  # a run killed between writing the manifest and removing it
            return manifest
        if changed:
            log.warning("the source of %s changed since it was prepared (%s); preparing it again", out,
                        "; ".join(changed[:5]) + ("; ..." if len(changed) > 5 else ""))
        else:
            log.warning("%s lacks %s whole; preparing it again", out,
                        ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
        _remove_prepared(out, manifest)
    key = {**key, SOURCE_FILES: files}  # in progress.json's key too: a half-done run over older files is not resumed
    return _prepare_into(out, key, source, tokenizer, val_fraction, shard_tokens, num_proc, progress)


def _prepare_into(out: Path, key: dict[str, Any], source: Any, tokenizer: Tokenizer, val_fraction: float,
                  shard_tokens: int, num_proc: int, progress: bool) -> dict[str, Any]:
    remove_stale_temp_files([out])  # left by a run killed while writing; never renamed into place
    state = {"batches_done": 0, "shards": {s: [] for s in SPLITS}}
    progress_path = out / PROGRESS
    if progress_path.is_file():
        saved = json.loads(progress_path.read_text())
        if saved.pop("key") == key:
            state = saved
            log.info("Resuming %s after %d batches", out, state["batches_done"])

    _write_shards(source, tokenizer, ShardWriter(out, key, tokenizer, shard_tokens, state), val_fraction, num_proc,
                  progress)
    return _finish(out, key, source, state)


def _write_shards(source: Any, tokenizer: Tokenizer, writer: ShardWriter, val_fraction: float, num_proc: int,
                  progress: bool) -> None:
    counted = ReadCounter(source)
    batches = doc_batches(counted.documents())
    for _ in islice(batches, writer.state["batches_done"]):  # already in shards: read past them without tokenizing
        pass
    bar = PrepareBar(f"tokenizing {getattr(source, 'name', 'corpus')}", counted.total, counted.read, progress)
    try:
        with closing(encode_batches(batches, tokenizer, val_fraction, num_proc)) as encoded_batches:  # stops the pool
            for encoded in encoded_batches:
                writer.add(encoded)
                bar.update(counted.read, sum(len(ids) for ids, _ in encoded.values()))
        writer.cut()
    finally:
        writer.discard()
        bar.close()


def missing_shards(out: Path, manifest: dict[str, Any]) -> list[str]:
    """The manifest's shards that are not there whole: a shard the user deleted, as every refusal of a broken one says
    to do, or one whose size is not what its token count makes (a 0-byte or cut file), is prepared again, not taken
    as done. A size per shard (a stat, no read): the sha256 is train's check."""
    itemsize = token_dtype(manifest.get("vocab_size") or 0).itemsize
    return [name for split in SPLITS for shard in manifest.get("splits", {}).get(split, {}).get("shards", [])
            if not _whole(out / (name := Path(shard["file"]).name), HEADER_BYTES + shard["tokens"] * itemsize)]


def _whole(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


def _remove_prepared(out: Path, manifest: dict[str, Any]) -> None:
    """The manifest first (the dir is then incomplete, as during a first prepare), then the shards it lists:
    only files prepare wrote."""
    (out / "manifest.json").unlink()
    for split in SPLITS:
        for shard in manifest.get("splits", {}).get(split, {}).get("shards", []):
            (out / Path(shard["file"]).name).unlink(missing_ok=True)


def _finish(out: Path, key: dict[str, Any], source: Any, state: dict) -> dict[str, Any]:
    tokens = {split: sum(s["tokens"] for s in state["shards"][split]) for split in SPLITS}
    check_splits_filled(tokens, json.dumps(key["source"]), key["val_fraction"], source.documents)
    stats = source.stats
    if stats.replaced_chars:
        log.warning("%d characters that were not valid UTF-8 were replaced with U+FFFD, in: %s",
                    stats.replaced_chars, ", ".join(stats.files[:10]) + (" ..." if stats.places > 10 else ""))
    manifest = {
        **key,
        "vocab_size": key["tokenizer"]["vocab_size"],
        "dtype": str(token_dtype(key["tokenizer"]["vocab_size"])),
        "replaced_chars": stats.replaced_chars,
        "files_with_replacements": stats.files[:100],  # the first 100; the count covers all
        "splits": {split: {"tokens": sum(s["tokens"] for s in state["shards"][split]),
                           "documents": sum(s["documents"] for s in state["shards"][split]),
                           "shards": state["shards"][split]} for split in SPLITS},
    }
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1))
    (out / PROGRESS).unlink(missing_ok=True)
    return manifest


def load_prepared(cache_dir: str | Path, tokenizer: Tokenizer, verify_sha256: bool = True) -> dict[str, ShardedTokens]:
    """Memory-map the train/val shards after checking them against the manifest and the configured tokenizer."""
    out = prepared_dir(cache_dir, tokenizer)
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        raise ConfigError(
            f"{manifest_path} is missing; run `python scripts/prepare_data.py` with the same data and tokenizer."
        )
    manifest = read_json(manifest_path)
    wanted = tokenizer_identity(tokenizer)
    if manifest["tokenizer"] != wanted:
        raise ConfigError(
            f"{manifest_path} was made with tokenizer {manifest['tokenizer']} but the config's tokenizer is {wanted}; "
            "prepare the data with this tokenizer (scripts/prepare_data.py) or choose the matching tokenizer=."
        )
    splits = {}
    for split in SPLITS:
        arrays, names = [], []
        for shard in manifest["splits"][split]["shards"]:
            stop_if_signalled("checking the prepared shards, before training started")
            path = out / shard["file"]
            tokens = open_shard(path)
            header = read_header(path)
            expected = (shard["tokens"], wanted["name"], wanted["vocab_size"])
            if (header.n_tokens, header.tokenizer, header.vocab_size) != expected:
                raise ConfigError(f"shard {path} does not match {manifest_path}; delete the directory, prepare again.")
            if verify_sha256 and sha256_file(path) != shard["sha256"]:
                raise ConfigError(f"shard {path} fails its sha256 check (it was modified); delete it, prepare again.")
            arrays.append(tokens)
            names.append(str(path))
        splits[split] = ShardedTokens(arrays, None if verify_sha256 else wanted["vocab_size"], names)
    return splits
