"""scripts/prepare_data.py as a user runs it: Hydra overrides in, shards out; mistakes exit 2 with a message."""

import json
import subprocess

import helpers


def run_script(*args: str, cwd) -> subprocess.CompletedProcess:
    return helpers.run_script("scripts/prepare_data.py", list(args), cwd=cwd)


def test_prepare_script_writes_shards(corpus, tmp_path):
    args = ("data=text_files", f"data.source.paths=[{corpus[0]},{corpus[1]}]", f"data.cache_dir={tmp_path / 'c'}",
            "data.num_proc=2", "data.val_fraction=0.1")
    first = run_script(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    manifest = json.loads((tmp_path / "c" / "bytes" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["documents"] + manifest["splits"]["val"]["documents"] == 300
    assert first.stdout.strip() == str(tmp_path / "c" / "bytes")


def test_prepare_script_bad_input_exits_2_without_traceback(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"content": "hello"}\n')
    result = run_script("data=text_files", f"data.source.paths=[{tmp_path / 'x.jsonl'}]", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "x.jsonl:1 has no field 'text'" in result.stderr and "data.source.text_field" in result.stderr



def test_prepare_script_in_a_dir_that_holds_a_run(corpus, tmp_path):
    """prepare_data.py runs in the launch dir (hydra.run.dir='.'), and used to meet train's run-dir guard there: in a
    checkout that had trained into '.' it answered "hydra.run.dir='.' already holds a run". A tool that writes only
    data.cache_dir is no run: it prepares, and leaves the run's files (and no lock) as they were."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"a run's checkpoint")
    (tmp_path / "run_summary.json").write_text("{}")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = run_script("data=text_files", f"data.source.paths=[{corpus[0]}]", f"data.cache_dir={tmp_path / 'c'}",
                      "data.num_proc=1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "c"])
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == b"a run's checkpoint"
