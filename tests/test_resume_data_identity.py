"""A checkpoint's data position counts windows of the train tokens it was trained on: it records what they were, and
resume=auto onto other tokens (the sources edited, the prepared data rebuilt) is refused with the ways out, where it
used to continue on other text without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import train_in_process, write_corpus

from gptlab.errors import ConfigError


@pytest.mark.parametrize("store", ["prepared", "memory"])
def test_resume_onto_rebuilt_data_is_refused(tmp_path: Path, store: str) -> None:
    files = write_corpus(tmp_path / "corpus", n_files=1, docs_per_file=60)
    data = ["data=text_files", f"data.source.paths=[{files[0]}]", f"data.cache_dir={tmp_path / 'cache'}",
            f"data.store={store}", "data.num_proc=1", "callbacks.text_samples=null", "trainer.val_check_interval=2"]
    run = tmp_path / "run"
    train_in_process(run, *data, "trainer.max_steps=2")
    # the same data: the run continues
    train_in_process(run, *data, "trainer.max_steps=3", "resume=auto")
    last = run / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    lines = files[0].read_text(encoding="utf-8").splitlines()
    edited = [json.dumps({"text": "an edited document " * 8})] + lines[1:]
    files[0].write_text("\n".join(edited) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        train_in_process(run, *data, "trainer.max_steps=4", "resume=auto")
    message = str(caught.value)
    assert f"other train tokens than data.store={store} now holds" in message
    assert "resume=restart" in message and "Restore the source as it was" in message
    assert last.read_bytes() == before  # the refused resume wrote nothing over the run


def test_resume_of_a_mixture_onto_a_rebuilt_source_is_refused(tmp_path: Path) -> None:
    """The same record per source of a mixture (data=mixture_example), naming the source that changed."""
    letters, digits = (write_corpus(tmp_path / name, n_files=1, docs_per_file=60, seed=seed)[0]
                       for name, seed in (("letters", 0), ("digits", 1)))

    def entry(name: str, path: Path) -> str:
        return f"{name}:{{source:{{_target_:gptlab.data.sources.TextFiles,paths:['{path}']}},weight:1}}"

    data = ["data=mixture_example", "~data.source.sources",
            f"+data.source.sources={{{entry('letters', letters)},{entry('digits', digits)}}}",
            "callbacks.text_samples=null", "trainer.val_check_interval=2"]
    run = tmp_path / "run"
    train_in_process(run, *data, "trainer.max_steps=2")
    train_in_process(run, *data, "trainer.max_steps=3", "resume=auto")
    digits.write_text(json.dumps({"text": "an edited document " * 8}) + "\n" + digits.read_text(encoding="utf-8"),
                      encoding="utf-8")
    with pytest.raises(ConfigError, match="other train tokens than the mixture's source 'digits' now holds"):
        train_in_process(run, *data, "trainer.max_steps=4", "resume=auto")


def test_resume_of_a_stream_onto_changed_files_or_settings_is_refused(tmp_path: Path) -> None:
    """data.store=streaming saves what its stream is (the files' sizes and mtimes, the tokenizer, the window size)
    beside its position; a resume whose stream differs is refused naming what changed, where it used to read other
    text from the saved record index without a word."""
    files = write_corpus(tmp_path / "corpus", n_files=2, docs_per_file=60)
    data = ["data=text_files", f"data.source.paths=[{files[0]},{files[1]}]", "data.store=streaming",
            "data.val_fraction=0.1", "data.val_windows=4", "callbacks.text_samples=null",
            "trainer.val_check_interval=2"]
    run = tmp_path / "run"
    train_in_process(run, *data, "trainer.max_steps=2")
    train_in_process(run, *data, "trainer.max_steps=3", "resume=auto")  # the same stream: the run continues
    last = run / "checkpoints" / "last.ckpt"
    before = last.read_bytes()

    with pytest.raises(ConfigError, match=r"another token stream .*data\.val_fraction was 0\.1, now 0\.2"):
        train_in_process(run, *data, "trainer.max_steps=4", "resume=auto", "data.val_fraction=0.2")

    files[1].write_text(files[1].read_text(encoding="utf-8") + json.dumps({"text": "one more document"}) + "\n",
                        encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        train_in_process(run, *data, "trainer.max_steps=4", "resume=auto")
    message = str(caught.value)
    assert f"{files[1]} changed size" in message and str(files[0]) not in message, message
    assert "Restore the source and settings as they were" in message and "resume=restart" in message
    assert last.read_bytes() == before  # the refused resumes wrote nothing over the run
