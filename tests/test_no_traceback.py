"""Inputs that used to end in a traceback from a library (Lightning, Hydra, torch.distributed.checkpoint) or from
gptlab itself: each is now one ConfigError that names the field and a way out, raised before anything runs, where
gptlab calls the library. In-process: the checks the entry scripts run first (check_config), not whole runs."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from helpers import ROOT, compose_config

from gptlab.checkpoint.reader import read_checkpoint
from gptlab.data.sources import TextFiles
from gptlab.errors import ConfigError
from gptlab.preflight.early_checks import check_config
from gptlab.runs import sweep_failures


@pytest.mark.parametrize("overrides, words", [
    (["callbacks.model_checkpoint.monitor=val/los"], ["callbacks.model_checkpoint.monitor='val/los'", "val/loss"]),
    (["trainer.precision=transformer-engine"], ["trainer.precision='transformer-engine'", "bf16-mixed"]),
    (["+trainer.strategy.reshard_after_forward=false"],
     ["trainer.strategy.reshard_after_forward", "add trainer=fsdp"]),
    (["+callbacks.stop._target_=lightning.pytorch.callbacks.EarlyStopping", "+callbacks.stop.monitor=val/los"],
     ["callbacks.stop.monitor='val/los'"]),
])
def test_refused_before_training(tmp_path: Path, overrides: list[str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        check_config(compose_config(overrides, tmp_path))
    assert all(w in str(refused.value) for w in words), str(refused.value)


def test_valid_neighbours_still_pass(tmp_path: Path) -> None:
    """The refusals above are narrow: the right key, a mixture source's key."""
    check_config(compose_config(["callbacks.model_checkpoint.monitor=val/bpb"], tmp_path))
    from gptlab.metrics import is_logged

    assert is_logged("val/loss/wiki") and not is_logged("val/loss/")


def _logged_names(path: Path) -> set[str]:
    """The literal names passed to `.log(...)` (or `log_step_scalar(...)`, the module's self.log that a checkpoint
    also carries) in a source file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("log", "log_step_scalar") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
            elif isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant):
                names.add(first.values[0].value + "<source>")
    return names


def test_the_monitor_list_holds_every_metric_training_logs() -> None:
    from gptlab.metrics import is_logged

    logged = set().union(*(_logged_names(p) for p in (ROOT / "src" / "gptlab" / "train").rglob("*.py")))
    assert {"train/loss", "val/loss", "x_throughput/mfu"} <= logged  # the walk finds them
    assert all(is_logged(name) for name in logged), sorted(n for n in logged if not is_logged(n))


@pytest.mark.parametrize("record", [{"text": 7}, {"text": ["a", "b"]}])
def test_a_jsonl_text_that_is_not_a_string_names_its_line(tmp_path: Path, record: dict) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ConfigError, match=r"c.jsonl:2: field 'text' holds .*not text.*data.source.text_field"):
        list(TextFiles([str(corpus)]).documents())


@pytest.mark.parametrize("index", [b"", b"\x80\x04garbage"])
def test_a_sharded_checkpoint_with_a_bad_index_is_one_message(tmp_path: Path, index: bytes) -> None:
    folder = tmp_path / "last.ckpt"
    folder.mkdir()
    torch.save({"global_step": 2}, folder / "meta.pt")
    (folder / ".metadata").write_bytes(index)
    with pytest.raises(ConfigError, match="lacks .metadata"):
        read_checkpoint(folder)


def test_a_sweep_job_failing_for_an_unknown_reason_records_it(tmp_path: Path) -> None:
    def bug() -> None:
        raise RuntimeError("a library broke")

    assert sweep_failures.run_recording_failure(bug, tmp_path / "3", "model.norm=post") is None
    record = json.loads((tmp_path / "3" / "failed.json").read_text())
    assert record["kind"] == "error" and "RuntimeError: a library broke" in record["reason"]
    assert "RuntimeError: a library broke" in sweep_failures.failure_report(tmp_path)


def test_a_group_set_to_null_says_how_to_remove_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gptlab.config.suggest import compose_message

    monkeypatch.setattr("sys.argv", ["src/train.py", "logger=null"])
    with pytest.raises(Exception) as compose_error:
        compose_config(["logger=null"], tmp_path)
    said = compose_message(compose_error.value)
    assert said is not None and "logger=null" in said and "~logger" in said, said
    check_config(compose_config(["~logger"], tmp_path))  # the way out it names


def test_an_unverified_corrupt_shard_is_named_not_an_index_error() -> None:
    """data.verify_sha256=false skips the hash; a shard whose bytes were overwritten then fed ids past the
    vocabulary to the embedding (IndexError in the first step). The window that holds one is refused instead."""
    import numpy as np

    from gptlab.data.shards import ShardedTokens

    good, corrupt = np.arange(100, dtype=np.uint16) % 257, np.full(100, 0xFFFF, dtype=np.uint16)
    tokens = ShardedTokens([good, corrupt], vocab_size=257, names=["train_000000.bin", "train_000001.bin"])
    assert len(tokens[0:50]) == 50  # the sound shard reads as before
    with pytest.raises(ConfigError, match=r"shard train_000001.bin holds token id 65535, beyond the vocabulary"):
        tokens[120:150]


@pytest.mark.parametrize("strategy, words", [("nonsense", "invalid strategy name"), ("deepspeed", "DeepSpeed")])
def test_a_trainer_lightning_refuses_is_one_message(tmp_path: Path, strategy: str, words: str) -> None:
    from gptlab.apps.build import instantiate_trainer

    cfg = compose_config([f"trainer.strategy={strategy}"], tmp_path)
    with pytest.raises(ConfigError, match=f"Lightning cannot build the Trainer from the trainer.* settings: .*{words}"):
        instantiate_trainer(cfg.trainer)
