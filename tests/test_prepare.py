"""Prepared shards: deterministic, resumable, verified on open; bad input gives a message, not a traceback."""

import json
from pathlib import Path

import numpy as np
import pytest

from gptlab.data import split as split_rule
from gptlab.data.prepare import load_prepared, prepare
from gptlab.data.shards import HEADER_BYTES, read_header
from gptlab.data.sources import HFDataset, TextFiles
from gptlab.data.split import is_val
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.errors import ConfigError


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(split_rule, "BATCH_DOCS", 16)  # many tokenization tasks (and shards) from a small corpus


def run(corpus, out, tokenizer=None, source=None, **kwargs):
    kwargs = {"val_fraction": 0.1, "shard_tokens": 4000, "progress": False, **kwargs}
    return prepare(source or TextFiles([str(p) for p in corpus]), tokenizer or ByteTokenizer(), out, **kwargs)


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_shards_hold_the_documents_joined_by_eot(corpus, tmp_path):
    manifest = run(corpus, tmp_path / "c")
    tok = ByteTokenizer()
    docs = [json.loads(line)["text"] for p in corpus for line in p.read_text().splitlines()]
    splits = load_prepared(tmp_path / "c", tok)
    for split, want_val in (("train", False), ("val", True)):
        expected = [i for d in docs if is_val(d, 0.1) == want_val for i in (*tok.encode(d), tok.eot_id)]
        assert splits[split][0 : len(splits[split])].tolist() == expected
        assert manifest["splits"][split]["documents"] == sum(is_val(d, 0.1) == want_val for d in docs)
    assert len(manifest["splits"]["train"]["shards"]) > 3 and manifest["dtype"] == "uint16"
    assert 0 < manifest["splits"]["val"]["documents"] < 0.25 * len(docs)


def test_output_is_byte_identical_across_runs_and_num_proc(corpus, tmp_path):
    run(corpus, tmp_path / "a", num_proc=1)
    run(corpus, tmp_path / "b", num_proc=2)
    a, b = files_of(tmp_path / "a" / "bytes"), files_of(tmp_path / "b" / "bytes")
    assert list(a) == list(b) and a == b
    assert "manifest.json" in a and "progress.json" not in a
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "a" / "bytes").iterdir()}
    run(corpus, tmp_path / "a")  # complete: nothing is tokenized or written again
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (tmp_path / "a" / "bytes").iterdir()}


def test_killed_run_resumes_without_corrupt_shards(corpus, tmp_path):
    run(corpus, tmp_path / "clean")

    class Killed(Exception):
        pass

    class Dies(TextFiles):
        """Stops the run after 150 documents, as a kill would (shards are renamed into place whole)."""

        def documents(self):
            for n, text in enumerate(super().documents()):
                if n == 150:
                    raise Killed
                yield text

    out = tmp_path / "resumed"
    with pytest.raises(Killed):
        run(corpus, out, source=Dies([str(p) for p in corpus]))
    partial = files_of(out / "bytes")
    assert "progress.json" in partial and "manifest.json" not in partial and len(partial) > 2
    (out / "bytes" / ".train_000099.bin.abc.tmp").write_bytes(b"half a shard")  # a write cut short by the kill
    calls = []
    original = split_rule._encode_batch
    prep_batches = lambda texts: calls.append(len(texts)) or original(texts)  # noqa: E731
    try:
        split_rule._encode_batch = prep_batches
        run(corpus, out)
    finally:
        split_rule._encode_batch = original
    assert files_of(out / "bytes") == files_of(tmp_path / "clean" / "bytes")
    assert 0 < sum(calls) < 300  # only the documents after the last completed shard were tokenized again


def test_truncated_shard_fails_naming_it(corpus, tmp_path):
    run(corpus, tmp_path / "c")
    shard = tmp_path / "c" / "bytes" / "train_000001.bin"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(ConfigError, match=r"train_000001\.bin has \d+ bytes .* truncated"):
        load_prepared(tmp_path / "c", ByteTokenizer())


@pytest.mark.parametrize("cut", [0, 100])
def test_a_cut_shard_is_prepared_again_not_called_complete(corpus, tmp_path, caplog, cut):
    """A 0-byte or cut shard (a disk that filled, a copy cut short) is not a complete cache: prepare makes it again,
    as it does a deleted one, instead of returning the manifest over it."""
    run(corpus, tmp_path / "c")
    run(corpus, tmp_path / "clean")
    shard = tmp_path / "c" / "bytes" / "train_000001.bin"
    shard.write_bytes(shard.read_bytes()[:cut])
    run(corpus, tmp_path / "c")
    assert "lacks train_000001.bin whole; preparing it again" in caplog.text
    assert files_of(tmp_path / "c" / "bytes") == files_of(tmp_path / "clean" / "bytes")


def test_tampered_shard_fails_naming_it(corpus, tmp_path):
    run(corpus, tmp_path / "c")
    shard = tmp_path / "c" / "bytes" / "val_000000.bin"
    data = bytearray(shard.read_bytes())
    data[HEADER_BYTES + 3] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"val_000000\.bin fails its sha256"):
        load_prepared(tmp_path / "c", ByteTokenizer())
    assert load_prepared(tmp_path / "c", ByteTokenizer(), verify_sha256=False)["val"]  # size and header still fine


def test_manifest_of_another_tokenizer_fails(corpus, tmp_path, gpt2):
    run(corpus, tmp_path / "c")
    (tmp_path / "c" / "bytes").rename(tmp_path / "c" / "gpt2")  # shards made with bytes, where gpt2 looks
    with pytest.raises(ConfigError, match=r"made with tokenizer .*'bytes'.* config's tokenizer is .*'gpt2'"):
        load_prepared(tmp_path / "c", gpt2)
    with pytest.raises(ConfigError, match=r"prepared with different settings \(tokenizer: prepared"):
        run(corpus, tmp_path / "c", tokenizer=gpt2)


def test_changed_settings_are_not_silently_reused(corpus, tmp_path):
    run(corpus, tmp_path / "c")
    with pytest.raises(ConfigError, match=r"val_fraction: prepared 0.1, config 0.2"):
        run(corpus, tmp_path / "c", val_fraction=0.2)


def test_large_vocab_uses_uint32(corpus, tmp_path):
    class Wide(ByteTokenizer):
        name, vocab_size, eot_id = "wide", 100_277, 100_276

    manifest = run(corpus, tmp_path / "c", tokenizer=Wide())
    assert manifest["dtype"] == "uint32"
    header = read_header(tmp_path / "c" / "wide" / "train_000000.bin")
    assert header.dtype == np.dtype("<u4") and header.vocab_size == 100_277
    assert int(load_prepared(tmp_path / "c", Wide())["train"][0:20000].max()) == 100_276


def test_non_utf8_bytes_are_replaced_counted_and_reported(tmp_path, caplog):
    (tmp_path / "a.txt").write_bytes(b"caf\xe9 au lait, " * 50)
    (tmp_path / "b.jsonl").write_bytes(b'{"text": "ok \xff\xfe then fine"}\n' * 40 + b'{"text": "clean"}\n')
    manifest = run([tmp_path / "a.txt", tmp_path / "b.jsonl"], tmp_path / "c", val_fraction=0.5)
    assert manifest["replaced_chars"] == 50 + 40 * 2
    assert manifest["files_with_replacements"][0] == str(tmp_path / "a.txt")
    assert "130 characters that were not valid UTF-8" in caplog.text


def _missing(d: Path) -> list[str]:
    return [str(d / "nope" / "*.txt")]


def _empty(d: Path) -> list[str]:
    (d / "e.txt").write_text("")
    return [str(d / "e.txt")]


def _no_text_field(d: Path) -> list[str]:
    (d / "x.jsonl").write_text('{"body": "a"}\n')
    return [str(d / "x.jsonl")]


def _unknown_format(d: Path) -> list[str]:
    (d / "x.csv").write_text("a")
    return [str(d / "x.csv")]


@pytest.mark.parametrize(
    "paths, message",
    [
        (_missing, r"nope/\*\.txt' matches no file"),
        (_empty, r"holds no text; check its paths"),
        (_no_text_field, r"x\.jsonl:1 has no field 'text' \(it has: \['body'\]\); set data.source.text_field"),
        (_unknown_format, r"x\.csv' is not one of"),
    ],
)
def test_bad_input_names_the_source(tmp_path, paths, message):
    with pytest.raises(ConfigError, match=message):
        prepare(TextFiles(paths(tmp_path)), ByteTokenizer(), tmp_path / "c", progress=False)


def test_unreachable_hub_dataset_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match=r"Skylion007/openwebtext.*offline.*data=text_files"):
        prepare(HFDataset("Skylion007/openwebtext"), ByteTokenizer(), tmp_path / "c", progress=False)


def test_unreachable_hub_fails_fast_without_offline_mode(tmp_path, monkeypatch):
    import socket

    from huggingface_hub import constants

    def no_network(address, timeout=None):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(ConfigError, match=r"roneneldan/TinyStories.*huggingface.co is unreachable.*HF_HUB_OFFLINE=1"):
        prepare(HFDataset("roneneldan/TinyStories"), ByteTokenizer(), tmp_path / "c", progress=False)


def final_bar(stderr: str) -> str:
    return [line for line in stderr.replace("\r", "\n").splitlines() if "tokenizing" in line][-1]


def test_progress_bar_counts_input_bytes_against_the_files_size(corpus, tmp_path, capsys):
    from tqdm import tqdm

    manifest = run(corpus, tmp_path / "c", progress=True)
    line = final_bar(capsys.readouterr().err)
    size = sum(p.stat().st_size for p in corpus)
    tokens = sum(manifest["splits"][s]["tokens"] for s in ("train", "val"))
    done = tqdm.format_sizeof(size, divisor=1024)
    assert "100%" in line and f"{done}/{done} " in line and "B/s" in line, line  # every byte read, of a known total
    assert " tok/s, " in line and f"{tqdm.format_sizeof(tokens)} tok" in line, line


def test_progress_bar_of_a_streamed_dataset_has_a_rate_but_no_total(corpus, tmp_path, capsys):
    source = HFDataset("json", data_files=[str(p) for p in corpus])
    run(corpus, tmp_path / "c", source=source, progress=True)
    line = final_bar(capsys.readouterr().err)
    assert "%" not in line and "B/s" in line and " tok/s, " in line, line


def test_parquet_is_read_in_row_batches_to_the_last_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"row {i}: " + "word " * (i % 40) for i in range(2500)]  # 3 batches of 1024 rows
    pq.write_table(pa.table({"text": texts, "n": list(range(2500))}), tmp_path / "t.parquet")
    source = TextFiles([str(tmp_path / "t.parquet")])
    manifest = run([], tmp_path / "c", source=source, val_fraction=0.2)
    assert sum(manifest["splits"][s]["documents"] for s in ("train", "val")) == 2500
    assert source.bytes_read == (tmp_path / "t.parquet").stat().st_size == source.size_bytes()
    assert load_prepared(tmp_path / "c", ByteTokenizer())["train"][0:4].tolist() == list(b"row ")
