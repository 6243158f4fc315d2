"""Nothing a file records runs code (issue 46): a `_target_` recorded in a checkpoint, a run or sweep dir or an
exported model is built only when it names a trusted class (gptlab.recorded), and a sharded checkpoint's pickled
`.metadata` and non-tensor entries are read restricted (gptlab.checkpoint.dcp_index). Each entry point gets crafted
files whose payload would write a file: it must be refused in one line naming the file and the target, and the file
must not appear."""

from __future__ import annotations

import json
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers import ROOT, TINY, compose_config, run_script, run_train, train_in_process

import gptlab
from gptlab.errors import ConfigError
from gptlab.recorded import KINDS, TRUSTED_ENV, build_recorded

TOKENIZER_KEYS = ("hyper_parameters", "run", "tokenizer")


def savetxt(payload: Path) -> dict[str, Any]:
    """A node Hydra 1.3.8 would instantiate (its blocklist stops os.system and shutil.rmtree, not this)."""
    return {"_target_": "numpy.savetxt", "fname": str(payload), "X": [1, 2, 3]}


class System:
    """Pickles as a call of os.system: what a foreign `.metadata` or shard entry could hold."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        return os.system, (self.command,)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    train_in_process(run_dir, "trainer.max_steps=2", "trainer.val_check_interval=2", "callbacks.text_samples=null")
    return run_dir


def crafted_checkpoint(run_dir: Path, out: Path, tokenizer: dict[str, Any]) -> Path:
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["hyper_parameters"]["run"]["tokenizer"] = tokenizer
    torch.save(ckpt, out)
    return out


def sharded_checkpoint(run_dir: Path, out: Path, state_dict_extra: dict[str, Any] | None = None) -> Path:
    """The run's last checkpoint as trainer=fsdp writes it: DCP shards and index, and Lightning's meta.pt."""
    import torch.distributed.checkpoint as dcp

    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    state = {"state_dict": {**ckpt.pop("state_dict"), **(state_dict_extra or {})}}
    ckpt.pop("optimizer_states", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=out)
    torch.save(ckpt, out / "meta.pt")
    return out


def foreign_index(run_dir: Path, out: Path, payload: Path) -> Path:
    folder = sharded_checkpoint(run_dir, out)
    (folder / ".metadata").write_bytes(pickle.dumps(System(f"touch {payload}")))
    return folder


def eval_config(ckpt: Path, tmp_path: Path) -> Any:
    return compose_config([f"ckpt_path={ckpt}", f"paths.output_dir={tmp_path / 'e'}"], config_name="eval")


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text[-3000:]
    return lines[0]


# ---- the allowlist

def targets(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [*([node["_target_"]] if "_target_" in node else []), *(t for v in node.values() for t in targets(v))]
    return [t for v in node for t in targets(v)] if isinstance(node, list) else []


def test_every_class_conf_names_is_trusted_for_its_kind() -> None:
    """gptlab.recorded lists what conf/ builds, so every run gptlab itself configures can be rebuilt."""
    for group, kind in (("tokenizer", "tokenizer"), ("data", "data"), ("callbacks", "callback"),
                        ("optimizer", "optimizer"), ("scheduler", "scheduler")):
        for path in (ROOT / "conf" / group).glob("*.yaml"):
            for target in targets(yaml.safe_load(path.read_text())):
                assert target in KINDS[kind], f"{path.relative_to(ROOT)} names {target}, not trusted for {kind}"


def test_each_trusted_name_imports() -> None:
    from hydra.utils import get_object

    for names in KINDS.values():
        for name in names:
            assert callable(get_object(name)), name


def test_a_nested_target_is_checked_too(tmp_path: Path) -> None:
    payload = tmp_path / "written"
    node = {"_target_": "gptlab.data.tokenizers.ByteTokenizer", "extra": [savetxt(payload)]}
    with pytest.raises(ConfigError, match=r"^x\.ckpt records the tokenizer _target_ 'numpy\.savetxt' "
                                          r"\(at extra\[0\]\._target_\)"):
        build_recorded(node, "tokenizer", "x.ckpt")
    assert not payload.exists()


def test_a_class_of_another_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match="gptlab.train.callbacks.ModelCheckpoint"):
        build_recorded({"_target_": "gptlab.train.callbacks.ModelCheckpoint"}, "tokenizer", "x.ckpt")


def test_a_user_trusts_their_own_class_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    node = {"_target_": "collections.Counter", "a": 1}
    with pytest.raises(ConfigError, match=TRUSTED_ENV):
        build_recorded(node, "tokenizer", "x.ckpt")
    monkeypatch.setenv(TRUSTED_ENV, "mypkg.Tok, collections.Counter")
    assert build_recorded(node, "tokenizer", "x.ckpt") == {"a": 1}


# ---- recorded tokenizers, per entry point

def test_sample_refuses_a_recorded_target(run_dir: Path, tmp_path: Path) -> None:
    """The issue's reproduction: `python src/sample.py ckpt_path=<it>` wrote the file, then raised a traceback."""
    payload = tmp_path / "written_by_sample"
    crafted = crafted_checkpoint(run_dir, tmp_path / "crafted.ckpt", savetxt(payload))
    proc = run_script("src/sample.py", [f"ckpt_path={crafted}", "max_new_tokens=2"])
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert str(crafted) in line and "'numpy.savetxt'" in line and TRUSTED_ENV in line, line
    assert not payload.exists()


def test_eval_export_lm_eval_and_load_refuse_a_recorded_target(run_dir: Path, tmp_path: Path) -> None:
    from gptlab.apps.evaluate import evaluate
    from gptlab.eval.lm_eval_adapter import GptlabLM

    payload = tmp_path / "written"
    crafted = crafted_checkpoint(run_dir, tmp_path / "crafted.ckpt", savetxt(payload))
    calls = {
        "eval": lambda: evaluate(eval_config(crafted, tmp_path)),
        "lm-eval": lambda: GptlabLM(ckpt_path=str(crafted)),
        "gptlab.load": lambda: gptlab.load(crafted),
    }
    for name, call in calls.items():
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(crafted))} records the tokenizer _target_ 'numpy"):
            call()
        assert not payload.exists(), name
    proc = run_script("scripts/export_hf.py", [f"ckpt_path={crafted}", f"out={tmp_path / 'hf'}"])
    assert proc.returncode == 2 and "'numpy.savetxt'" in one_line(proc.stderr) and not payload.exists()


def test_a_nested_target_in_a_checkpoint_is_refused(run_dir: Path, tmp_path: Path) -> None:
    payload = tmp_path / "written"
    tokenizer = {"_target_": "gptlab.data.tokenizers.TiktokenTokenizer", "encoding": savetxt(payload)}
    crafted = crafted_checkpoint(run_dir, tmp_path / "crafted.ckpt", tokenizer)
    with pytest.raises(ConfigError, match=r"'numpy\.savetxt' \(at encoding\._target_\)"):
        gptlab.load(crafted)
    assert not payload.exists()


def test_an_exported_model_directory_is_checked(run_dir: Path, tmp_path: Path) -> None:
    from gptlab.checkpoint.reader import load_model
    from gptlab.eval.sampling import sample
    from gptlab.interop import save_pretrained
    from gptlab.interop.hf_export import GPTLAB_TOKENIZER_KEY

    out = tmp_path / "hf"
    save_pretrained(load_model(run_dir)[0], out)
    config = json.loads((out / "config.json").read_text())
    payload = tmp_path / "written"
    (out / "config.json").write_text(json.dumps({**config, GPTLAB_TOKENIZER_KEY: savetxt(payload)}))
    for call in (lambda: gptlab.load(out), lambda: sample(compose_config([f"ckpt_path={out}"], config_name="sample"))):
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(out / 'config.json'))} records the tokenizer"):
            call()
    assert not payload.exists()


def test_a_report_refuses_a_target_recorded_in_a_sweep_job(tmp_path: Path) -> None:
    """A job's config_resolved.yaml: the reports build its tokenizer for presets whose vocab_size is null."""
    from gptlab.report.runs import job_model

    payload = tmp_path / "written"
    job = tmp_path / "sweep" / "0"
    job.mkdir(parents=True)
    resolved = {"model": {"vocab_size": None, "n_layer": 1}, "tokenizer": savetxt(payload)}
    (job / "config_resolved.yaml").write_text(yaml.safe_dump(resolved))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(job / 'config_resolved.yaml'))} records the tokeni"):
        job_model(job)
    assert not payload.exists()


# ---- sharded checkpoints: the pickled index and shard entries

def test_every_reader_refuses_a_foreign_index(run_dir: Path, tmp_path: Path) -> None:
    from gptlab.apps.evaluate import evaluate
    from gptlab.eval.sampling import sample

    payload = tmp_path / "written_by_the_index"
    folder = foreign_index(run_dir, tmp_path / "last.ckpt", payload)
    calls = {
        "eval": lambda: evaluate(eval_config(folder, tmp_path)),
        "sample": lambda: sample(compose_config([f"ckpt_path={folder}"], config_name="sample")),
        "gptlab.load": lambda: gptlab.load(folder),
    }
    for name, call in calls.items():
        with pytest.raises(ConfigError, match=r"\.metadata cannot be read: it names posix\.system") as err:
            call()
        assert str(folder) in str(err.value) and "lacks" not in str(err.value), name
        assert not payload.exists(), name
    for script, args in (("scripts/convert_checkpoint.py", [str(folder), str(tmp_path / "one.ckpt")]),
                         ("scripts/export_hf.py", [f"ckpt_path={folder}", f"out={tmp_path / 'hf'}"])):
        proc = run_script(script, args)
        assert proc.returncode == 2 and "posix.system" in one_line(proc.stderr), (script, proc.stderr[-2000:])
        assert not payload.exists(), script


def test_a_shard_entry_is_read_weights_only(run_dir: Path, tmp_path: Path) -> None:
    """DCP loads non-tensor entries with torch.load(weights_only=False); gptlab's reader does not."""
    from gptlab.checkpoint.reader import read_checkpoint

    payload = tmp_path / "written_by_a_shard"
    folder = sharded_checkpoint(run_dir, tmp_path / "last.ckpt", {"model.extra": System(f"touch {payload}")})
    with pytest.raises(ConfigError, match=r"shards cannot be read: it holds Python objects that gptlab does not "
                                          r"unpickle.*posix\.system"):
        read_checkpoint(folder)
    assert not payload.exists()


def test_a_whole_sharded_checkpoint_still_loads(run_dir: Path, tmp_path: Path) -> None:
    from gptlab.checkpoint.reader import read_checkpoint

    folder = sharded_checkpoint(run_dir, tmp_path / "last.ckpt")
    ours = read_checkpoint(folder)["state_dict"]
    theirs = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_the_fsdp_strategy_loads_through_the_restricted_reader(run_dir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """trainer=fsdp resume: Lightning's ModelParallelStrategy reads the shards with DCP's default reader, unless
    GPTFSDPStrategy.load_checkpoint routes it through gptlab's."""
    from lightning.fabric.strategies import model_parallel
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.checkpoint.api import CheckpointException

    from gptlab.checkpoint.dcp_reader import SafeReader
    from gptlab.execution.fsdp_strategy import GPTFSDPStrategy
    from gptlab.lightning_internals import sharded_loads_through

    whole = sharded_checkpoint(run_dir, tmp_path / "whole.ckpt")
    weights = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]

    def lightning_load(self: Any, path: Any, weights_only: Any = None) -> dict[str, Any]:  # its sharded branch
        state = {"state_dict": {k: torch.zeros_like(v) for k, v in weights.items()}}
        model_parallel._distributed_checkpoint_load(state, Path(path))
        return state

    monkeypatch.setattr(ModelParallelStrategy, "load_checkpoint", lightning_load)
    strategy = object.__new__(GPTFSDPStrategy)
    loaded = strategy.load_checkpoint(whole)["state_dict"]
    assert all(torch.equal(loaded[k], weights[k]) for k in weights)
    payload = tmp_path / "written_by_the_index"
    folder = foreign_index(run_dir, tmp_path / "last.ckpt", payload)
    with pytest.raises(ConfigError, match=r"\.metadata cannot be read: it names posix\.system"):
        strategy.load_checkpoint(folder)
    with sharded_loads_through(SafeReader), pytest.raises(CheckpointException, match="posix.system"):  # past it too
        lightning_load(strategy, folder)
    assert not payload.exists()


def test_fsdp_resume_auto_refuses_a_foreign_index_in_one_line(run_dir: Path, tmp_path: Path) -> None:
    payload = tmp_path / "written_by_the_index"
    run = tmp_path / "run"
    foreign_index(run_dir, run / "checkpoints" / "last.ckpt", payload)
    proc = run_train([f"hydra.run.dir={run}", *TINY, "trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=1",
                      "resume=auto"], cwd=tmp_path)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert str(run / "checkpoints" / "last.ckpt") in line and ".metadata cannot be read: it names posix.system" in line
    assert not payload.exists()


def test_gptlab_load_of_a_run_dir_with_a_foreign_index_says_why_in_python(run_dir: Path, tmp_path: Path) -> None:
    """gptlab.load(<FSDP run dir whose .metadata pickles code>) said "... give ckpt_path=<...>" (gptlab.load has no
    ckpt_path) and put the reason in a log warning only; a .ckpt of pickled code read "truncated or corrupt" in a
    Hugging Face dir's pytorch_model.bin."""
    payload = tmp_path / "written_by_the_index"
    run = tmp_path / "run"
    foreign_index(run_dir, run / "checkpoints" / "last.ckpt", payload)
    with pytest.raises(ConfigError) as err:
        gptlab.load(run)
    message = str(err.value)
    assert f"gptlab.load({str(run)!r})" in message and "gptlab.load(<" in message, message
    assert "ckpt_path" not in message and "posix.system" in message, message
    with pytest.raises(ConfigError) as err:
        gptlab.load(run / "checkpoints" / "last.ckpt")
    assert "ckpt_path" not in str(err.value) and "posix.system" in str(err.value), err.value
    assert not payload.exists()


def test_a_pytorch_model_bin_of_pickled_code_is_refused_as_such(run_dir: Path, tmp_path: Path) -> None:
    from gptlab.eval.sampling import sample

    payload = tmp_path / "written_by_the_bin"
    hf = tmp_path / "hf"
    proc = run_script("scripts/export_hf.py", [f"ckpt_path={run_dir}", f"out={hf}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    from safetensors.torch import load_file

    weights = load_file(hf / "model.safetensors")
    (hf / "model.safetensors").unlink()
    torch.save({**weights, "extra": System(f"touch {payload}")}, hf / "pytorch_model.bin")
    for call in (lambda: gptlab.load(hf), lambda: sample(compose_config([f"ckpt_path={hf}"], config_name="sample"))):
        with pytest.raises(ConfigError) as err:
            call()
        message = str(err.value)
        assert "holds Python objects that gptlab does not unpickle" in message and "posix.system" in message, message
        assert "truncated or corrupt" not in message
    assert not payload.exists()
