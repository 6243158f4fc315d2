"""scripts/prepare_data.py as a user runs it: Hydra overrides in, shards out; mistakes exit 2 with a message."""

import json
import subprocess
import sys

import helpers
from helpers import ROOT


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


def test_sigkilled_prepare_resumes_to_the_same_bytes(tmp_path):
    """A real kill -9 in the middle of python_stdlib, then a re-run: same files as an uninterrupted run."""
    import signal
    import time

    def args(cache):
        return ("data=python_stdlib", f"data.cache_dir={cache}", "data.shard_tokens=2000000", "data.num_proc=1")

    script = [sys.executable, str(ROOT / "scripts" / "prepare_data.py")]
    victim = subprocess.Popen([*script, *args(tmp_path / "killed")], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=helpers.CHECKOUT_ENV)  # this checkout's gptlab
    progress = tmp_path / "killed" / "bytes" / "progress.json"
    deadline = time.time() + 120
    while not progress.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    out = tmp_path / "killed" / "bytes"
    assert progress.exists() and not (out / "manifest.json").exists()  # it really stopped midway
    assert run_script(*args(tmp_path / "killed"), cwd=tmp_path).returncode == 0
    assert run_script(*args(tmp_path / "clean"), cwd=tmp_path).returncode == 0
    clean = tmp_path / "clean" / "bytes"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    assert all((out / p.name).read_bytes() == p.read_bytes() for p in clean.iterdir())
