"""Checkpoints are whole or absent: a failed or killed save leaves the previous file intact and no temp file
anywhere, a full disk is one message and resumable, resume=auto skips files that do not load, and a bad checkpoint
given to any entry script is one paragraph naming the file."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import compose_config, load_checkpoint, run_script, run_tiny, scalars, train_in_process

from gptlab.atomic import atomic_write_text
from gptlab.checkpoint.atomic_io import AtomicCheckpointIO
from gptlab.errors import ConfigError, DiskFullError

RUN = ["trainer.max_steps=8", "trainer.val_check_interval=4", "callbacks.periodic_checkpoint.every_n_train_steps=2"]


def _state(value: float) -> dict:
    return {"state_dict": {"model.w": torch.full((256, 256), value)}, "global_step": int(value)}


def test_a_save_that_fails_midway_leaves_the_old_checkpoint_and_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    staging = tmp_path / "tmpdir"  # $TMPDIR: Lightning's own IO staged checkpoints here, then moved them
    staging.mkdir()
    monkeypatch.setenv("TMPDIR", str(staging))
    monkeypatch.setattr(tempfile, "tempdir", None)  # drop the cached default so $TMPDIR is read again
    io, path = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint(_state(1.0), path)

    real_save = torch.save

    def dies_midway(obj, f) -> None:
        f.write(b"PK\x03\x04" + b"\0" * 100_000)  # half a zip, as a kill or an I/O error would leave it
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(OSError, match="Input/output error"):
        io.save_checkpoint(_state(2.0), path)
    monkeypatch.setattr(torch, "save", real_save)
    assert load_checkpoint(path)["global_step"] == 1  # the old one, whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]  # no temp beside it
    io.save_checkpoint(_state(3.0), path)
    assert load_checkpoint(path)["global_step"] == 3
    assert list(staging.iterdir()) == []  # nothing ever passed through $TMPDIR


def test_disk_full_mid_run_is_one_message_then_resume_auto_finishes(tmp_path: Path, small_disk) -> None:
    disk, real = small_disk
    run = disk / "run"
    fill = ["+callbacks.fill._target_=helpers.FillDisk", "+callbacks.fill.step=5",
            f"+callbacks.fill.filler={disk}/filler", f"+callbacks.fill.simulate={not real}"]
    failed = run_tiny(run, *RUN, *fill, check=False)
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert "gptlab: error: disk full: could not write" in failed.stderr
    assert f"resume=auto hydra.run.dir={run}" in failed.stderr
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not [n for n in names if n.endswith(".tmp")], names  # no partial file left
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 4  # the save before it, whole
    (disk / "filler").unlink(missing_ok=True)  # space freed
    run_tiny(run, *RUN, "resume=auto")
    assert sorted(scalars(run)["train/loss"]) == list(range(1, 9))
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 8


def test_any_file_written_on_a_full_disk_is_a_disk_full_error_and_the_old_file_stays(small_disk, monkeypatch) -> None:
    disk, real = small_disk
    target = disk / "run_summary.json"
    atomic_write_text(target, "old")
    if real:
        with open(disk / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 4096)
    else:
        def no_space(self, data) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(DiskFullError, match=rf"disk full: could not write {target} \([\d.,]+ (KB|GiB) free, about "
                                            r"3.9 KB "
                                            r"needed\); nothing was replaced"):
        atomic_write_text(target, "new " * 1000)
    assert target.read_text() == "old"
    assert sorted(p.name for p in disk.iterdir()) == sorted(["run_summary.json"] + (["filler"] if real else []))


def test_a_kill_right_after_a_checkpoint_loses_no_logged_step(tmp_path: Path) -> None:
    """Lightning logs a step's metrics after that step's checkpoint is written; killed in between, the resumed run
    logs them from the checkpoint, so train/loss has every step, equal to the uninterrupted run's."""
    train_in_process(tmp_path / "ref", *RUN)
    reference = scalars(tmp_path / "ref")
    run = tmp_path / "run"
    killed = run_tiny(run, *RUN, "+callbacks.killer._target_=helpers.KillAfterCheckpoint", "+callbacks.killer.step=4",
                      check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 4
    assert 4 not in scalars(run)["train/loss"]  # the 4th step was saved but never logged
    train_in_process(run, *RUN, "resume=auto")
    resumed = scalars(run)
    for tag in ("train/loss", "train/lr", "train/grad_norm"):
        assert resumed[tag] == reference[tag], tag  # every step, bit for bit


def test_a_checkpoint_from_before_the_steps_done_axis_relogs_its_last_step_where_it_belongs(tmp_path: Path) -> None:
    """Checkpoints written before gptlab.train.step_axis hold Lightning's step (one behind) and `lr`: a run resumed
    from one in its own dir logs them at the steps done, as train/lr, like everything else in its new event file."""
    from types import SimpleNamespace

    from gptlab.train.callbacks.relog import RelogLastStep

    class Recorder:
        save_dir = str(tmp_path)

        def __init__(self) -> None:
            self.logged: list[tuple[dict, int]] = []

        def log_metrics(self, metrics: dict, step: int) -> None:
            self.logged.append((metrics, step))

    for saved, step in (({"step": 3.0, "train/loss": 2.5, "lr": 1e-3}, 4),
                        ({"steps_done": 4.0, "train/loss": 2.5, "train/lr": 1e-3}, 4)):
        relog = RelogLastStep()
        recorder = Recorder()
        trainer = SimpleNamespace(ckpt_path=str(tmp_path / "checkpoints" / "last.ckpt"), loggers=[recorder])
        relog.on_load_checkpoint(trainer, None, {"last_step_scalars": saved})
        relog.on_train_start(trainer, None)
        assert recorder.logged == [({"train/loss": 2.5, "train/lr": 1e-3}, step)], saved


def test_resume_auto_skips_checkpoints_that_do_not_load_and_names_them(tmp_path: Path, caplog) -> None:
    run = tmp_path / "run"
    train_in_process(run, *RUN[1:], "trainer.max_steps=4")
    checkpoints = run / "checkpoints"
    last = checkpoints / "last.ckpt"
    (checkpoints / "step0000005-val9.9999.ckpt").write_bytes(b"")  # a full disk's 0-byte file, newer
    (checkpoints / "preempted.ckpt").write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # cut short, newest
    with caplog.at_level(logging.INFO):
        train_in_process(run, *RUN, "resume=auto")
    log = caplog.text
    assert "skipping checkpoint" in log and "preempted.ckpt" in log and "step0000005-val9.9999.ckpt" in log
    assert "truncated or corrupt" in log and "empty (0 bytes)" in log
    assert f"resume=auto: continuing from {last}" in log
    assert sorted(scalars(run)["train/loss"]) == list(range(1, 9))


@pytest.fixture
def bad_checkpoints(tmp_path: Path) -> dict[str, Path]:
    """A good run (4 layers) and three bad files: truncated, text, and a 0-byte newest in a run dir."""
    good_run = tmp_path / "good"
    train_in_process(good_run, "trainer.max_steps=2", "model.n_layer=4")
    last = good_run / "checkpoints" / "last.ckpt"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "truncated.ckpt").write_bytes(last.read_bytes()[:5000])
    (bad / "text.ckpt").write_text("these are my notes, not a checkpoint\n")
    return {"good": last, "truncated": bad / "truncated.ckpt", "text": bad / "text.ckpt", "run": good_run}


def test_bad_checkpoints_are_one_paragraph_in_every_entry_script(bad_checkpoints, tmp_path: Path) -> None:
    from gptlab.apps.evaluate import evaluate
    from gptlab.eval.sampling import sample

    truncated, text = bad_checkpoints["truncated"], bad_checkpoints["text"]
    for path, reason in [(truncated, "truncated or corrupt: "), (text, "not a PyTorch checkpoint: it starts with "
                                                                       "'these are my notes")]:
        with pytest.raises(ConfigError, match=rf"ckpt_path='{path}': it cannot be read as a checkpoint .*{reason}"):
            train_in_process(tmp_path / "t", "trainer.max_steps=2", f"ckpt_path={path}")
        with pytest.raises(ConfigError, match=rf"ckpt_path='{path}': it cannot be read"):
            evaluate(compose_config([f"ckpt_path={path}", f"paths.output_dir={tmp_path / 'e'}"], config_name="eval"))
        with pytest.raises(ConfigError, match=rf"ckpt_path='{path}': it cannot be read"):
            sample(compose_config([f"ckpt_path={path}", "tokenizer=bytes", "max_new_tokens=2"], config_name="sample"))
    # Another shape: the differing field, the two values and what to do.
    with pytest.raises(ConfigError, match=r"checkpoint has model.n_layer=4, the config asks 1\. Continue with the "
                                          r"checkpoint's settings, or drop ckpt_path to start a new run"):
        train_in_process(tmp_path / "t", "trainer.max_steps=2", f"ckpt_path={bad_checkpoints['good']}")
    # Export, as a user runs it: exit code 2, one paragraph, no traceback.
    proc = run_script("scripts/export_hf.py", [f"ckpt_path={text}", f"out={tmp_path / 'hf'}"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"gptlab: error: ckpt_path='{text}': it cannot be read as a checkpoint (37 bytes; "
        + proc.stderr.split("(37 bytes; ", 1)[1].strip()]
    assert not (tmp_path / "hf").exists()


def test_a_run_dir_as_ckpt_path_takes_its_newest_checkpoint_that_loads(bad_checkpoints, tmp_path: Path,
                                                                        caplog) -> None:
    from gptlab.eval.sampling import sample

    run, last = bad_checkpoints["run"], bad_checkpoints["good"]
    for best in (run / "checkpoints").glob("step*.ckpt"):
        os.utime(best, (1, 1))  # the best by val/loss: oldest
    os.utime(last, (2, 2))
    (run / "checkpoints" / "preempted.ckpt").write_bytes(b"")  # newest, empty
    with caplog.at_level(logging.INFO):
        texts = sample(compose_config([f"ckpt_path={run}", "max_new_tokens=3", "prompt=ab"], config_name="sample"))
    assert len(texts) == 1 and texts[0].startswith("ab")
    assert "skipping checkpoint" in caplog.text and "preempted.ckpt: it is empty (0 bytes)" in caplog.text
    assert f"using its newest readable checkpoint, {last}" in caplog.text
    with pytest.raises(ConfigError, match=r"is a directory whose 2 checkpoint\(s\) do not load \(the newest, "):
        sample(compose_config([f"ckpt_path={tmp_path / 'bad'}", "tokenizer=bytes"], config_name="sample"))
