"""Every way out a corpus refusal offers works when followed (issue 33, item 2): the sources, tokenizers, shards and
stores of gptlab.data, as `python src/train.py data=... data.store=...` and `python scripts/prepare_data.py` meet
them on tiny corpora under a temp dir (offline).

`data_refusal` is what train says up to its first batch: ways_out.built_refusal, then the datamodule's prepare_data,
setup and first train and val batches (which read the corpus). `prepare_refusal` is prepare_data.py's path. Ways out
that are overrides are followed by ways_out.follow; the others (delete a file, run prepare_data.py, resume with the
run's settings) are done as the words say, and the command then passes. A `raise` of the data modules without a case
(or an UNREACHED reason) fails test_every_raise_of_the_data_modules_is_reached_by_a_case.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Optional

import hydra
import numpy as np
import pytest
import ways_out
from helpers import compose_config, write_corpus
from ways_out import Refusal, as_refusal, compose, follow, refusal, unreached

from gptlab.apps.build import build_run
from gptlab.apps.prepare_data import prepare_from_config
from gptlab.config.suggest import compose_message
from gptlab.config.validate import check_node
from gptlab.preflight import early_checks, guards

GB = 1e9
DATA = Path(tempfile.gettempdir()) / "gptlab-ways-out" / f"data-{os.getpid()}"  # this process's: its cases edit it
CORPUS = DATA / "corpus"
TINY = ("model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32", "data.batch_size=4",
        "trainer.accelerator=cpu")


def corpora() -> None:
    """The files the cases read: a JSONL corpus, a one-line text, a text that is not UTF-8."""
    write_corpus(CORPUS, n_files=2, docs_per_file=80)
    (DATA / "short.txt").write_text("a few words")
    (DATA / "latin1").mkdir()
    (DATA / "latin1" / "doc.txt").write_bytes("caf\xe9 ".encode("latin-1") * 40)


def text_files(*paths: str, extra: tuple[str, ...] = (), store: str = "memory", cache: str = "c") -> tuple[str, ...]:
    """`data=text_files` over `paths` (files or globs), a tiny model, the shards (if any) under DATA/cache/<cache>."""
    return ("data=text_files", f"data.source.paths=[{','.join(paths)}]", f"data.store={store}",
            f"data.cache_dir={DATA / 'cache' / cache}",
            *(o for o in TINY if o.split("=")[0] not in {e.split("=")[0] for e in extra}), *extra)


GOOD = f"{CORPUS}/*.jsonl"
HF = ("data=hf", "data.store=memory", f"data.cache_dir={DATA / 'cache' / 'hf'}", *TINY)
RANKS = ways_out.ROOT / "data" / "cache" / "tiktoken" / "gpt2.tiktoken"  # the gpt2_ranks fixture's file
STAND_INS = {"data.source.paths": f"[{GOOD}]", "data.source.data_files": f"[{GOOD}]"}  # what <list> asks for


def started(command: tuple[str, ...], saved: Optional[dict] = None) -> Any:
    """The datamodule of `python src/train.py <command>` as fit starts it (prepare_data, setup, the checkpoint's data
    position `saved` loaded, as Lightning restores it), with its Trainer; raises what they raise."""
    cfg = compose(command)
    run = build_run(cfg, early_checks._check_before_run(cfg), None)
    data = run.datamodule
    data.trainer = run.trainer
    data.prepare_data()
    data.setup("fit")
    if saved is not None:
        data.load_state_dict(saved)
    return data


def data_refusal(command: tuple[str, ...], saved: Optional[dict] = None) -> Optional[Refusal]:
    """What `python src/train.py <command>` says up to its first train and val batch (None: it would train), resuming
    from a checkpoint whose data position is `saved` if given."""
    first = refusal(command)
    if first is not None:
        return first
    try:
        data = started(command, saved)
        next(iter(data.train_dataloader()))
        next(iter(data.val_dataloader()))
    except Exception as err:
        return as_refusal(err)
    return None


def prepare_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """What `python scripts/prepare_data.py <command>` says (None: it prepared the shards)."""
    try:
        cfg = compose_config(list(command), config_name="prepare_data")
    except Exception as err:
        message = compose_message(err)
        if message is None:
            raise
        return Refusal(message, None)
    try:
        check_node("data.", cfg.data)
        prepare_from_config(cfg)
    except Exception as err:
        return as_refusal(err)
    return None


def assert_followed(command: tuple[str, ...], refuse=data_refusal) -> Refusal:
    first = refuse(command)
    assert first is not None, f"{' '.join(command)} is not refused"
    walk = follow(command, 3, refuse=refuse, stand_ins=STAND_INS)
    assert not walk.broken, "\n".join(walk.broken)
    return first


def tokenizer(command: tuple[str, ...]) -> Any:
    return hydra.utils.instantiate(compose(command).tokenizer)


# ---- refusals whose ways out are overrides ------------------------------------------------------------------------
def cases() -> list[tuple[str, ...]]:
    return [
        text_files(),
        text_files(f"{DATA}/nothing/*.txt"),
        text_files(GOOD, extra=("data.val_fraction=0.0001",)),
        text_files(GOOD, extra=("model.block_size=8000",)),
        text_files(GOOD, store="streaming", extra=("model.block_size=4000",)),
        text_files(GOOD, extra=("data.val_fraction=0.9999",)),
        HF,
        text_files(GOOD, extra=("data.samples_per_epoch=2",)),
        ("data=pydocs", "data.source.name=bogus", "data.store=memory"),
        text_files(GOOD, extra=("tokenizer=gpt2", f"tokenizer.ranks_file={DATA}/nothing.tiktoken")),
        text_files(GOOD, extra=("tokenizer=gpt2", f"tokenizer.ranks_file={DATA}/short.txt")),
        text_files(GOOD, extra=("tokenizer=cl100k_base", f"tokenizer.ranks_file={RANKS}")),
    ]


@pytest.fixture(scope="module", autouse=True)
def written(gpt2_ranks):
    assert gpt2_ranks == RANKS
    corpora()
    yield
    shutil.rmtree(DATA)


def case_id(command: tuple[str, ...]) -> str:
    return " ".join(o.replace(str(DATA), "") for o in command if o not in TINY and not o.startswith("data.cache_dir"))


@pytest.mark.parametrize("command", cases(), ids=case_id)
def test_each_data_refusals_ways_out_work(command) -> None:
    assert_followed(command)


# ---- the user's files: refusals whose ways out are edits of a file or of data.source.paths ----------------------
def lines(*more: str) -> str:
    """A corpus file: the first corpus file's lines, then `more`."""
    return (CORPUS / "part0.jsonl").read_text() + "".join(f"{m}\n" for m in more)


def format_refusal() -> Refusal:
    (DATA / "notes.csv").write_text("notes, one document\n")
    return data_refusal(text_files(GOOD, f"{DATA}/notes.csv"))


def test_a_file_of_another_format_is_converted_or_dropped() -> None:
    refused = format_refusal()
    assert "'.txt', '.jsonl'" in refused.message or ".txt, .jsonl" in refused.message, refused
    assert "convert it or drop it" in refused.message
    assert data_refusal(text_files(GOOD)) is None  # dropped from data.source.paths
    (DATA / "notes.txt").write_text((DATA / "notes.csv").read_text())  # converted
    assert data_refusal(text_files(GOOD, f"{DATA}/notes.txt")) is None


def record_refusal(bad: str) -> tuple[Path, tuple[str, ...], Refusal]:
    path = DATA / "records.jsonl"
    path.write_text(lines(bad, '{"text": "after it"}'))
    command = text_files(str(path))
    return path, command, data_refusal(command)


BAD_RECORDS = [('{"text": "cut off', "is not valid JSON"), ('{"text": 5}', "not text")]


@pytest.mark.parametrize("bad,words", BAD_RECORDS)
def test_a_bad_record_is_fixed_or_dropped(bad, words) -> None:
    """The message names the file and line; dropping that line, or fixing its record, lets the run start."""
    path, command, refused = record_refusal(bad)
    assert words in refused.message, refused
    named = re.search(rf"{re.escape(str(path))}:(\d+)", refused.message)
    assert named, f"{refused.message!r} names no line"
    kept = path.read_text().splitlines()
    line = int(named.group(1))
    path.write_text("\n".join(kept[: line - 1] + kept[line:]) + "\n")
    assert data_refusal(command) is None, "dropping the line it names"
    path.write_text("\n".join(kept[: line - 1] + ['{"text": "fixed"}'] + kept[line:]) + "\n")
    assert data_refusal(command) is None, "fixing the record it names"


def empty_refusal() -> Refusal:
    (DATA / "empty.jsonl").write_text('{"text": ""}\n' * 3)
    return data_refusal(text_files(f"{DATA}/empty.jsonl"))


def one_document_refusal() -> Refusal:
    (DATA / "one.jsonl").write_text('{"text": "the only document"}\n' * 2)  # one distinct text, twice
    return data_refusal(text_files(f"{DATA}/one.jsonl"))


def test_a_source_of_one_document_is_told_to_add_documents() -> None:
    """One document never splits: "raise data.val_fraction" was the way out, refused again at every value."""
    refused = one_document_refusal()
    assert refused is not None and "no val_fraction can split it" in refused.message, refused
    assert "add documents" in refused.message and "raise data.val_fraction" not in refused.message
    assert data_refusal(text_files(f"{DATA}/one.jsonl", GOOD)) is None


def test_a_source_without_text_is_pointed_at_files_with_text() -> None:
    refused = empty_refusal()
    assert "holds no text; check its paths" in refused.message, refused
    assert data_refusal(text_files(f"{DATA}/empty.jsonl", GOOD)) is None


LATIN1 = f"{DATA}/latin1/doc.txt"


def latin1_refusal() -> Refusal:
    return data_refusal(HF + ("data.source.path=text", f"data.source.data_files=[{LATIN1},{GOOD}]"))


def test_a_hf_builder_over_bytes_that_are_not_utf8_moves_to_text_files() -> None:
    """"for local files use data=text_files": the same files with data=text_files (one document per .txt file,
    besides the corpus) start, the bytes replaced."""
    refused = latin1_refusal()
    assert "not UTF-8" in refused.message and "use data=text_files" in refused.message, refused
    assert data_refusal(text_files(LATIN1, GOOD)) is None


# ---- resuming: a checkpoint's data position that this run cannot continue -----------------------------------------
def saved_position(command: tuple[str, ...], batches: int = 1) -> dict:
    """The data position a checkpoint of `command` saves after `batches` micro-batches (what datamodule.state_dict
    gives the checkpoint)."""
    data = started(command)
    data.train_dataloader()
    data.trainer.fit_loop.epoch_loop.batch_progress.current.processed = batches
    return data.state_dict()


RUN = text_files(GOOD)
RESUMES = {  # the run that saved the position, the resumed command, the words, the resumed command as they say
    "another global batch": (RUN, ("data.batch_size=8",), "but not the global batch",
                             ("data.batch_size=2", "global_batch_tokens=128")),
    "inside a step": (text_files(GOOD, extra=("data.batch_size=2", "trainer.accumulate_grad_batches=2")),
                      ("data.batch_size=4",
                      "trainer.accumulate_grad_batches=1"), "inside an optimizer step",
                      ("data.batch_size=2", "trainer.accumulate_grad_batches=2")),
    "another store": (text_files(GOOD, store="streaming"), ("data.store=memory",), "resume with the store",
                      ("data.store=streaming",)),
    "another stream layout": (text_files(GOOD, store="streaming", extra=("data.num_workers=1",)),
                              ("data.num_workers=0",), "cannot move to another layout", ("data.num_workers=1",)),
    "another stream": (text_files(GOOD, store="streaming", extra=("model.block_size=16",)), ("model.block_size=32",),
                       "data.block_size was 16, now 32", ("model.block_size=16",)),
}


@pytest.mark.parametrize("case", RESUMES)
def test_resume_refusals_ways_out_work(case) -> None:
    """The resumed run is refused naming the setting that differs; set as the checkpoint had it (as the words say),
    the same checkpoint's position is continued. (resume=restart and a new hydra.run.dir, which start afresh without
    it, are followed by test_ways_out.py's run-dir cases.)"""
    run, changed, words, back = RESUMES[case]
    saved = saved_position(run)
    resumed = ways_out.typed_in(run, *changed[0].split("=", 1)) if changed else run
    for override in changed[1:]:
        resumed = ways_out.typed_in(resumed, *override.split("=", 1))
    refused = data_refusal(resumed, saved)
    assert refused is not None and words in refused.message, refused
    for override in back:
        key = override.split("=", 1)[0]
        assert key in refused.message or key.replace("model.", "data.") in refused.message or \
            "global_batch_tokens" in refused.message, (override, refused.message)
        resumed = ways_out.typed_in(resumed, *override.split("=", 1))
    assert data_refusal(resumed, saved) is None, data_refusal(resumed, saved)


def edited_refusal(store: str) -> tuple[Path, tuple[str, ...], dict, Refusal]:
    """A run's data position saved, then one of its files edited."""
    edited = DATA / "edited" / "part.jsonl"
    edited.parent.mkdir(exist_ok=True)
    edited.write_text(lines())
    run = text_files(GOOD, str(edited), store=store, cache="edited")
    saved = saved_position(run)
    edited.write_text(lines('{"text": "one more document"}'))
    return edited, run, saved, data_refusal(run, saved)


@pytest.mark.parametrize("store", ["memory", "prepared"])
def test_resuming_over_edited_files_is_refused_until_they_are_restored(store) -> None:
    """"Restore the source as it was ... to continue this run": done, the checkpoint's position is continued."""
    edited, run, saved, refused = edited_refusal(store)
    assert refused is not None and "Restore the source as it was" in refused.message, refused
    edited.write_text(lines())
    assert data_refusal(run, saved) is None, data_refusal(run, saved)


# ---- prepared shards: refusals whose ways out are files to delete and prepare_data.py to run ---------------------
SHARDS = DATA / "cache" / "shards"
PREPARE = ("data=text_files", f"data.source.paths=[{GOOD}]", "data.store=prepared", f"data.cache_dir={SHARDS}",
           "data.num_proc=1")
TRAIN_PREPARED = text_files(GOOD, store="prepared", cache="shards", extra=("data.num_proc=1",))


def first_shard(split: str = "train") -> Path:
    manifest = json.loads((SHARDS / "bytes" / "manifest.json").read_text())
    return SHARDS / "bytes" / manifest["splits"][split]["shards"][0]["file"]


def patched(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def edit_manifest(change) -> None:
    path = SHARDS / "bytes" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


DAMAGES = {  # what breaks the prepared data, and the raise that refuses it
    "bad header": (lambda: first_shard().write_bytes(b"not a shard"), None),  # None: another size, prepared again
    "another format": (lambda: patched(first_shard(), 8, struct.pack("<H", 9)), "has shard format"),
    "wrong token size": (lambda: patched(first_shard(), 10, struct.pack("<H", 4)), "-byte tokens for a"),
    "truncated": (lambda: first_shard().write_bytes(first_shard().read_bytes()[:-3]), None),
    "modified": (lambda: patched(first_shard(), first_shard().stat().st_size - 2, b"\x07\x00"), "sha256 check"),
    "ids beyond the vocabulary": (lambda: patched(first_shard(), 256, b"\xff" * (first_shard().stat().st_size - 256)),
                                  "beyond the vocabulary"),
    "manifest cut off": (lambda: (SHARDS / "bytes" / "manifest.json").write_text('{"format": '), "not valid JSON"),
    "manifest not a dict": (lambda: (SHARDS / "bytes" / "manifest.json").write_text("[]"), "not a manifest"),
    "manifest counts other tokens": (lambda: edit_manifest(
        lambda m: m["splits"]["train"]["shards"][0].update(tokens=m["splits"]["train"]["shards"][0]["tokens"] + 1)),
        None),
}
PATH = re.compile(r"(/[\w./-]*\w)")


def do_what_it_says(message: str) -> list[str]:
    """The file ways out of a prepared-data refusal, done as a user reads them: delete the file ("delete it") or
    directory it names ("delete the directory", "Delete <dir>"), then run prepare_data.py ("prepare again",
    "re-run prepare_data.py"). Returns what was done."""
    done, named = [], [Path(p) for p in PATH.findall(message)]
    if re.search(r"\bdelete it\b", message, re.I):
        named[0].unlink()
        done.append(f"deleted {named[0]}")
    directory = re.search(r"\bdelete (the directory|/[\w./-]*\w)", message, re.I)
    if directory:
        target = named[0].parent if directory.group(1) == "the directory" else Path(directory.group(1))
        assert target.is_dir() and SHARDS in (target, *target.parents), f"{message!r} names {target} to delete"
        shutil.rmtree(target)
        done.append(f"deleted {target}/")
    if re.search(r"prepare again|prepare_data\.py", message):
        assert prepare_refusal(PREPARE) is None, prepare_refusal(PREPARE)
        done.append("ran prepare_data.py")
    assert done, f"{message!r} offers nothing to do"
    return done


@pytest.mark.parametrize("damage", DAMAGES)
def test_prepared_data_refusals_ways_out_work(damage) -> None:
    """Each refusal of damaged shards or manifest names what to delete and to prepare again: done as it says, the
    same training command then starts (train prepares too; prepare_data.py is the command the words name)."""
    shutil.rmtree(SHARDS, ignore_errors=True)
    assert prepare_refusal(PREPARE) is None
    breaks, words = DAMAGES[damage]
    breaks()
    command = TRAIN_PREPARED + (("data.verify_sha256=false",) if damage == "ids beyond the vocabulary" else ())
    refused = data_refusal(command)
    if words is None:  # a shard of another size than its count makes: train's prepare makes it again, unasked
        assert refused is None, refused
        return
    assert refused is not None and words in refused.message, refused
    done = do_what_it_says(refused.message)
    assert data_refusal(command) is None, f"after {done}: {data_refusal(command)}"


class NoEndOfText:
    """A user's own tokenizer (tokenizer._target_=test_ways_out_data.NoEndOfText): bytes, with no end-of-text id."""

    name, vocab_size, eot_id = "no_eot", 256, None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def token_byte_lengths(self) -> Any:
        return np.ones(self.vocab_size, dtype=np.int64)


def eot_refusal(masking: str) -> Refusal:
    return data_refusal(text_files(GOOD, extra=(f"data.document_masking={masking}",
                                                f"tokenizer._target_={__name__}.NoEndOfText")))


@pytest.mark.parametrize("masking", ["true", "false"])
def test_a_tokenizer_without_end_of_text_is_refused_for_one_that_has_it(masking) -> None:
    """Documents are joined with end-of-text whether masked or not: refused either way (not a TypeError deep in
    the tokenization); the tokenizers the message names start."""
    refused = eot_refusal(masking)
    assert refused is not None and "has none (eot_id=None)" in refused.message, refused
    for named in re.findall(r"tokenizer=(\w+)", refused.message):
        assert data_refusal(text_files(GOOD, extra=(f"data.document_masking={masking}", f"tokenizer={named}"))) is None


# ---- the tokenizer's ranks: tiktoken's download and scripts/fetch_gpt2_ranks.py's, offline ------------------------
GPT2 = text_files(GOOD, extra=("tokenizer=gpt2",))


def download_refusal(monkeypatch, looked: Path) -> Refusal:
    """tokenizer=gpt2 with no ranks file where it looks (GPTLAB_RANKS_DIR=`looked`) and no network."""
    import tiktoken

    def no_network(name: str) -> None:
        raise ConnectionError("HTTPSConnectionPool(host='openaipublic.blob.core.windows.net', port=443)")

    monkeypatch.setenv("GPTLAB_RANKS_DIR", str(looked))
    monkeypatch.setattr(tiktoken, "get_encoding", no_network)
    ways_out.refusal.cache_clear()  # train's checks build the tokenizer: not as they found it before
    return data_refusal(GPT2)


def test_ranks_that_cannot_be_downloaded_ways_out_work(monkeypatch, tmp_path) -> None:
    """tokenizer.ranks_file=<path> is followed with the ranks; what fetch_gpt2_ranks.py does (the file, in the dir
    the message names) lets the same command start."""
    refused = download_refusal(monkeypatch, tmp_path / "ranks")
    assert "python scripts/fetch_gpt2_ranks.py" in refused.message, refused
    walk = follow(GPT2, 1, refuse=data_refusal, stand_ins={"tokenizer.ranks_file": str(RANKS)})
    assert not walk.broken and walk.followed, walk.broken
    named = re.search(r"found none in (\S+)\.", refused.message).group(1)
    Path(named).parent.mkdir(parents=True)
    shutil.copy(RANKS, named)
    ways_out.refusal.cache_clear()  # the tokenizer is built again: the file is there now
    assert data_refusal(GPT2) is None
    ways_out.refusal.cache_clear()


def fetch_refusal(monkeypatch, tmp_path: Path, sdist: Optional[dict[str, bytes]]) -> Refusal:
    """fetch_gpt2_ranks with `pip download` answered locally: an sdist holding `sdist` (None: pip fails)."""
    from gptlab.data import ranks

    def pip(cmd: list[str], **kwargs: Any) -> Any:
        if sdist is not None:
            with tarfile.open(Path(cmd[-1]) / "openai-whisper-20250625.tar.gz", "w:gz") as tar:
                for name, data in sdist.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        return subprocess.CompletedProcess(cmd, 0 if sdist is not None else 1, "", "Could not reach PyPI")

    monkeypatch.setattr(ranks.subprocess, "run", pip)
    try:
        ranks.fetch_gpt2_ranks(tmp_path / "cache")
    except Exception as err:
        return as_refusal(err)
    raise AssertionError("fetched")


FETCHES = {"pip fails": None, "another layout": {"whisper/assets/other.tiktoken": b"x"},
           "other bytes": {"openai-whisper/whisper/assets/gpt2.tiktoken": b"not the ranks"}}


@pytest.mark.parametrize("sdist", FETCHES)
def test_fetch_gpt2_ranks_refusals_ways_out_work(monkeypatch, tmp_path, sdist) -> None:
    """Each refusal says to copy gpt2.tiktoken to the path it names yourself: done, the script returns that file."""
    from gptlab.data import ranks

    refused = fetch_refusal(monkeypatch, tmp_path, FETCHES[sdist])
    target = re.search(r"copy gpt2.tiktoken to (\S+) yourself", refused.message)
    assert target, refused
    shutil.copy(RANKS, target.group(1))
    assert ranks.fetch_gpt2_ranks(tmp_path / "cache") == Path(target.group(1))
    assert not list((tmp_path / "cache").glob("tmp*")), "the download's temp dir is left"


# ---- bad input to prepare_data.py writes nothing --------------------------------------------------------------------
def test_prepare_data_refused_on_a_bad_record_leaves_no_cache_dir(tmp_path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": 5}\n')
    cache = tmp_path / "data" / "cache"
    refused = prepare_refusal(("data=text_files", f"data.source.paths=[{tmp_path}/a.jsonl]", f"data.cache_dir={cache}",
                               "data.num_proc=1"))
    assert refused is not None and "not text" in refused.message, refused
    assert not (tmp_path / "data").exists(), "written: " + ", ".join(map(str, (tmp_path / "data").rglob("*")))


# ---- which raises the cases reach ----------------------------------------------------------------------------------
UNREACHED = {  # each is refused first, in other words, by what the reason names (or needs what it names)
    ("data/shards.py", "(bad header)"): "prepare, before setup, prepares again a shard of another size than its count",
    ("data/shards.py", "truncated or corrupt"): "prepare, before setup, prepares again a shard of another size than "
                                                "its count",
    ("data/prepare.py", "does not match"): "prepare, before setup, prepares again a shard of another size than the "
                                           "manifest's count makes",
    ("data/split.py", "must be in (0, 1)"): "the schema's range check of data.val_fraction (train, prepare_data.py)",
    ("data/prepare.py", "must be >= 1"): "the schema's range checks of data.shard_tokens and data.num_proc",
    ("data/tokenizers.py", "invalid_choice(\"tokenizer.encoding\""): "the schema's choice check of tokenizer.encoding "
                                                                    "refuses first, in the same words",
    ("data/stores.py", "data.cache_dir is not set"): "the schema's check of data.cache_dir (a non-empty string) "
                                                     "refuses null first",
    ("data/prepare.py", "is missing; run `python scripts/prepare_data.py`"): "prepare (Lightning's prepare_data, "
                                                                            "before setup) writes the manifest first",
    ("data/prepare.py", "was made with tokenizer"): "prepare, before setup, refuses another tokenizer's manifest "
                                                    "first (_mismatch: 'prepared with different settings')",
    ("data/shards.py", "is missing; re-run"): "prepare, before setup, prepares a missing shard again",
    ("data/stores.py", "trained on a mixture"): "resuming a mixture's checkpoint (data=mixture_example tokenizes "
                                                "python_stdlib: test_mixture.py)",
}


def reached_sites(monkeypatch, tmp_path) -> set:
    """The raise sites of every case of this file, each refusal computed as its test computes it."""
    reached = {data_refusal(c).site for c in cases()}
    for damage in DAMAGES:
        shutil.rmtree(SHARDS, ignore_errors=True)
        assert prepare_refusal(PREPARE) is None
        DAMAGES[damage][0]()
        refused = data_refusal(TRAIN_PREPARED + (("data.verify_sha256=false",) if "vocabulary" in damage else ()))
        if refused is not None:  # None: prepared again (DAMAGES' None)
            reached.add(refused.site)
    for run, changed, _, _ in RESUMES.values():
        resumed = run
        for override in changed:
            resumed = ways_out.typed_in(resumed, *override.split("=", 1))
        reached.add(data_refusal(resumed, saved_position(run)).site)
    reached |= {fetch_refusal(monkeypatch, tmp_path / s.replace(" ", "_"), sdist).site for s, sdist in FETCHES.items()}
    reached.add(download_refusal(monkeypatch, tmp_path / "no-ranks").site)
    ways_out.refusal.cache_clear()
    reached |= {format_refusal().site, empty_refusal().site, one_document_refusal().site, latin1_refusal().site,
                eot_refusal("true").site, edited_refusal("memory")[3].site,
                *(record_refusal(bad)[2].site for bad, _ in BAD_RECORDS)}
    return reached


def test_every_raise_of_the_data_modules_is_reached_by_a_case(monkeypatch, tmp_path) -> None:
    """A refusal added to a data module without a case here (or in UNREACHED, with why) fails this test."""
    missing = unreached(reached_sites(monkeypatch, tmp_path), UNREACHED, ways_out.AREAS[Path(__file__).name])
    assert not missing, "raises no case reaches:\n" + "\n".join(missing)


def test_shards_prepared_with_other_settings_ways_out_work() -> None:
    """"point data.cache_dir elsewhere, or delete that directory to prepare again": each lets the run start."""
    shutil.rmtree(SHARDS, ignore_errors=True)
    assert prepare_refusal(PREPARE) is None
    other = ways_out.typed_in(TRAIN_PREPARED, "data.val_fraction", "0.2")
    refused = data_refusal(other)
    assert refused is not None and "point data.cache_dir elsewhere" in refused.message, refused
    assert data_refusal(ways_out.typed_in(other, "data.cache_dir", str(DATA / "cache" / "elsewhere"))) is None
    named = Path(PATH.findall(refused.message)[0])
    assert named.name == "manifest.json" and "delete that directory" in refused.message
    shutil.rmtree(named.parent)
    assert data_refusal(other) is None


def mixture(*extra: str) -> tuple[str, ...]:
    """data=mixture_example over two sources of the JSONL corpus (weights 3 and 1), held in memory."""
    def entry(name: str, weight: int) -> str:
        return f"{name}:{{source:{{_target_:gptlab.data.sources.TextFiles,paths:['{GOOD}']}},weight:{weight}}}"

    return ("data=mixture_example", "~data.source.sources", f"+data.source.sources={{{entry('a', 3)},{entry('b', 1)}}}",
            "data.store=memory", *extra)


@pytest.mark.parametrize("corpus", [
    pytest.param(("trainer.max_steps=7",), id="builtin"),
    pytest.param(mixture(), id="mixture"),
    pytest.param(mixture("data.sampling=epoch"), id="mixture-epoch"),
    pytest.param(("data=text_files", f"data.source.paths=[{GOOD}]", "data.store=streaming"), id="streaming"),
])
def test_a_batch_too_large_for_memory_is_followed_to_one_the_corpus_fills(corpus, monkeypatch) -> None:
    """Issue 46: data.batch_size=100000 was told 2420, refused again for 2384 (no margin), then for the corpus (an
    epoch of 1546 windows holds no step of 2384). Each way out that sets a batch now trains as typed, up to its first
    batch: memory with its margin, and an epoch that holds a step (tests/test_guards.py covers epoch sampling and
    global_batch_tokens' step in-process). A mixture's epoch is one pass over its sources, or data.samples_per_epoch
    with either sampling; a stream repeats without end, so memory's batch is the one to follow."""
    monkeypatch.setattr(guards, "free_bytes", lambda accelerator: 24 * GB)
    command = (*corpus, "data.batch_size=100000", "trainer.accelerator=cpu")
    first = data_refusal(command)
    assert first is not None and "free RAM is 24.0 GB" in first.message, first
    typed = [way for way in ways_out.ways_out(first.message, command).ways
             if any(o.startswith("data.batch_size=") and o not in command for o in way.command)]
    # the corpus's largest and memory's with a longer epoch; a stream, which repeats without end, fills memory's
    assert typed and ("data.samples_per_epoch=" in first.message) == ("data.store=streaming" not in command), first
    for way in typed:
        assert data_refusal(way.command) is None, (way.said, data_refusal(way.command))
