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

import json
import re
import shutil
import struct
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
from gptlab.preflight import early_checks

DATA = Path(tempfile.gettempdir()) / "gptlab-ways-out" / "data"
CORPUS = DATA / "corpus"
TINY = ("model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32", "data.batch_size=4",
        "trainer.accelerator=cpu")


def corpora() -> None:
    """The files the cases read, written once: a JSONL corpus, a one-line text, and files a user gets wrong."""
    if (DATA / "done").is_file():
        return
    write_corpus(CORPUS, n_files=2, docs_per_file=80)
    (DATA / "short.txt").write_text("a few words")
    (DATA / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "cut off\n')
    (DATA / "numbers.jsonl").write_text('{"text": 5}\n')
    (DATA / "notes.csv").write_text("a,b\n")
    (DATA / "latin1").mkdir(exist_ok=True)
    (DATA / "latin1" / "doc.txt").write_bytes("caf\xe9 ".encode("latin-1") * 40)
    (DATA / "done").write_text("")


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
def written(gpt2_ranks) -> None:
    assert gpt2_ranks == RANKS
    corpora()


@pytest.mark.parametrize("index", range(len(cases())))
def test_each_data_refusals_ways_out_work(index) -> None:
    print(data_refusal(cases()[index]))
    assert_followed(cases()[index])


# ---- the user's files: refusals whose ways out are edits of a file or of data.source.paths ----------------------
def lines(*more: str) -> str:
    """A corpus file: the first corpus file's lines, then `more`."""
    return (CORPUS / "part0.jsonl").read_text() + "".join(f"{m}\n" for m in more)


def test_a_file_of_another_format_is_converted_or_dropped() -> None:
    (DATA / "notes.csv").write_text("notes, one document\n")
    refused = data_refusal(text_files(GOOD, f"{DATA}/notes.csv"))
    assert "'.txt', '.jsonl'" in refused.message or ".txt, .jsonl" in refused.message, refused
    assert "convert it or drop it" in refused.message
    assert data_refusal(text_files(GOOD)) is None  # dropped from data.source.paths
    (DATA / "notes.txt").write_text((DATA / "notes.csv").read_text())  # converted
    assert data_refusal(text_files(GOOD, f"{DATA}/notes.txt")) is None


@pytest.mark.parametrize("bad,words", [('{"text": "cut off', "is not valid JSON"), ('{"text": 5}', "not text")])
def test_a_bad_record_is_fixed_or_dropped(bad, words) -> None:
    """The message names the file and line; dropping that line, or fixing its record, lets the run start."""
    path = DATA / "records.jsonl"
    path.write_text(lines(bad, '{"text": "after it"}'))
    command = text_files(str(path))
    refused = data_refusal(command)
    assert words in refused.message, refused
    named = re.search(rf"{re.escape(str(path))}:(\d+)", refused.message)
    assert named, f"{refused.message!r} names no line"
    kept = path.read_text().splitlines()
    line = int(named.group(1))
    path.write_text("\n".join(kept[: line - 1] + kept[line:]) + "\n")
    assert data_refusal(command) is None, "dropping the line it names"
    path.write_text("\n".join(kept[: line - 1] + ['{"text": "fixed"}'] + kept[line:]) + "\n")
    assert data_refusal(command) is None, "fixing the record it names"


def test_a_source_without_text_is_pointed_at_files_with_text() -> None:
    (DATA / "empty.jsonl").write_text('{"text": ""}\n' * 3)
    refused = data_refusal(text_files(f"{DATA}/empty.jsonl"))
    assert "holds no text; check its paths" in refused.message, refused
    assert data_refusal(text_files(f"{DATA}/empty.jsonl", GOOD)) is None


def test_a_hf_builder_over_bytes_that_are_not_utf8_moves_to_text_files() -> None:
    """"for local files use data=text_files": the same files with data=text_files (one document per .txt file,
    besides the corpus) start, the bytes replaced."""
    latin1 = f"{DATA}/latin1/doc.txt"
    refused = data_refusal(HF + ("data.source.path=text", f"data.source.data_files=[{latin1},{GOOD}]"))
    assert "not UTF-8" in refused.message and "use data=text_files" in refused.message, refused
    assert data_refusal(text_files(latin1, GOOD)) is None


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


@pytest.mark.parametrize("store", ["memory", "prepared"])
def test_resuming_over_edited_files_is_refused_until_they_are_restored(store) -> None:
    """"Restore the source as it was ... to continue this run": done, the checkpoint's position is continued."""
    edited = DATA / "edited" / "part.jsonl"
    edited.parent.mkdir(exist_ok=True)
    edited.write_text(lines())
    run = text_files(GOOD, str(edited), store=store, cache="edited")
    saved = saved_position(run)
    edited.write_text(lines('{"text": "one more document"}'))
    refused = data_refusal(run, saved)
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
    "bad header": (lambda: first_shard().write_bytes(b"not a shard"), "bad header"),
    "another format": (lambda: patched(first_shard(), 8, struct.pack("<H", 9)), "has shard format"),
    "wrong token size": (lambda: patched(first_shard(), 10, struct.pack("<H", 4)), "-byte tokens for a"),
    "truncated": (lambda: first_shard().write_bytes(first_shard().read_bytes()[:-3]), "truncated or corrupt"),
    "modified": (lambda: patched(first_shard(), first_shard().stat().st_size - 2, b"\x07\x00"), "sha256 check"),
    "ids beyond the vocabulary": (lambda: patched(first_shard(), 256, b"\xff" * (first_shard().stat().st_size - 256)),
                                  "beyond the vocabulary"),
    "manifest cut off": (lambda: (SHARDS / "bytes" / "manifest.json").write_text('{"format": '), "not valid JSON"),
    "manifest not a dict": (lambda: (SHARDS / "bytes" / "manifest.json").write_text("[]"), "not a manifest"),
    "manifest counts other tokens": (lambda: edit_manifest(
        lambda m: m["splits"]["train"]["shards"][0].update(tokens=m["splits"]["train"]["shards"][0]["tokens"] + 1)),
        "does not match"),
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


@pytest.mark.parametrize("masking", ["true", "false"])
def test_a_tokenizer_without_end_of_text_is_refused_for_one_that_has_it(masking) -> None:
    """Documents are joined with end-of-text whether masked or not: refused either way (not a TypeError deep in
    the tokenization); the tokenizers the message names start."""
    own = text_files(GOOD, extra=(f"data.document_masking={masking}", f"tokenizer._target_={__name__}.NoEndOfText"))
    refused = data_refusal(own)
    assert refused is not None and "has none (eot_id=None)" in refused.message, refused
    for named in re.findall(r"tokenizer=(\w+)", refused.message):
        assert data_refusal(text_files(GOOD, extra=(f"data.document_masking={masking}", f"tokenizer={named}"))) is None
