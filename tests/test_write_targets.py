"""gptlab never replaces a file it did not write: an export or a conversion refuses an existing target unless given
its overwrite flag, never writes into a run's checkpoints/, and a run never continues from a weights-only file."""

from __future__ import annotations

import errno
import runpy
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT
from omegaconf import OmegaConf

from gptlab.checkpoint import convert
from gptlab.checkpoint.reader import check_resumable
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.runs.resume import resume_checkpoint


def run_script(script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> tuple:
    """A script's main in this process: its exit code and stderr."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / script), run_name="__main__")
    return exit_.value.code, capsys.readouterr().err


def a_run_dir(path: Path) -> Path:
    """What a training run leaves for the refusal to recognise: .hydra/ and a checkpoint."""
    (path / ".hydra").mkdir(parents=True)
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / "last.ckpt").write_bytes(b"the run's full checkpoint")
    return path


def test_export_refuses_a_directory_holding_the_users_files(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"the user": "own"}')
    code, err = run_script("export_hf.py", monkeypatch, capsys, f"ckpt_path={tmp_path / 'any.ckpt'}", f"out={out}")
    assert code == 2 and err.startswith("gptlab: error: out="), err
    assert "already holds files (config.json)" in err and "overwrite=true" in err, err
    assert (out / "config.json").read_text() == '{"the user": "own"}'


def test_export_and_convert_refuse_a_runs_checkpoints_dir_whatever_the_flag(tmp_path: Path, monkeypatch,
                                                                             capsys) -> None:
    run = a_run_dir(tmp_path / "run")
    last = run / "checkpoints" / "last.ckpt"
    code, err = run_script("export_hf.py", monkeypatch, capsys, f"ckpt_path={last}", f"out={run / 'checkpoints'}",
                           "overwrite=true")
    assert code == 2 and "a training run's checkpoint dir" in err, err
    for flag in ([], ["--overwrite"]):
        code, err = run_script("convert_checkpoint.py", monkeypatch, capsys, str(tmp_path / "fsdp"), str(last), *flag)
        assert code == 2 and "a training run's checkpoint dir" in err, err
    assert last.read_bytes() == b"the run's full checkpoint"


def test_convert_refuses_an_existing_file_without_overwrite(tmp_path: Path, monkeypatch, capsys) -> None:
    target = tmp_path / "model.ckpt"
    target.write_bytes(b"someone's file")
    code, err = run_script("convert_checkpoint.py", monkeypatch, capsys, str(tmp_path / "fsdp"), str(target))
    assert code == 2 and "already exists and was left as it is" in err and "--overwrite" in err, err
    assert target.read_bytes() == b"someone's file"


def test_convert_onto_a_read_only_filesystem_is_one_message(tmp_path: Path, monkeypatch) -> None:
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(convert, "resolve_checkpoint", lambda path, what: path)
    monkeypatch.setattr(convert, "is_sharded", lambda path: True)
    monkeypatch.setattr(convert, "read_checkpoint", lambda path, what: {"state_dict": {}})
    monkeypatch.setattr(convert, "save_whole", read_only)
    with pytest.raises(ConfigError, match=r"out='.*x.ckpt' cannot be written \(Read-only file system\)"):
        convert.to_one_file(tmp_path / "fsdp", tmp_path / "x.ckpt")


def weights_only_file(path: Path) -> Path:
    """What convert_checkpoint.py writes: Lightning's meta (loops, hyperparameters) and the weights, no optimizer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {"model.w": torch.zeros(1)}, "global_step": 2, "loops": {},
                "hyper_parameters": {"model": {}}}, path)
    return path


def test_no_run_continues_from_a_weights_only_file(tmp_path: Path) -> None:
    given = weights_only_file(tmp_path / "weights.ckpt")
    with pytest.raises(ConfigError, match="weights only .*Give ckpt_path=<the run's own checkpoint"):
        check_resumable(given, GPTConfig())
    run = tmp_path / "run"
    weights_only_file(run / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError, match="resume=auto: no checkpoint .* can be continued .*weights only"):
        resume_checkpoint(OmegaConf.create({"resume": "auto", "ckpt_path": None}), run)


@pytest.mark.parametrize("script, args", [
    ("coord_check.py", ["--out", "{target}"]),
    ("coord_check.py", []),  # its default, coord_check.png in the working dir, is the user's place too
    ("mup_transfer_plot.py", ["{sweep}", "--out", "{target}"]),
    ("convert_checkpoint.py", ["{sweep}", "{target}"]),
])
def test_every_script_refuses_an_existing_target_before_its_work(script: str, args: list[str], tmp_path: Path,
                                                                 monkeypatch, capsys) -> None:
    target = tmp_path / "coord_check.png"
    target.write_bytes(b"the user's own file")
    monkeypatch.chdir(tmp_path)
    given = [a.format(target=target, sweep=tmp_path / "no_such_sweep") for a in args]
    code, err = run_script(script, monkeypatch, capsys, *given)
    assert code == 2 and err.startswith("gptlab: error: ") and err.count("\n") == 1, err
    assert str(target.name) in err and "already exists and was left as it is" in err and "--overwrite" in err, err
    assert target.read_bytes() == b"the user's own file"


def test_coord_check_with_overwrite_replaces_the_plot_whole(tmp_path: Path, monkeypatch, capsys) -> None:
    target = tmp_path / "plot.png"
    target.write_bytes(b"an old plot")
    monkeypatch.setattr(sys, "argv", ["coord_check.py", "--widths", "16", "32", "--steps", "1", "--seeds", "1",
                                      "--out", str(target), "--overwrite"])
    runpy.run_path(str(ROOT / "scripts" / "coord_check.py"), run_name="__main__")
    assert target.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]  # no temporary file left beside it
