"""Every entry script turns a bad option value or a bad file into one `gptlab: error:` line naming it, and exit 2.

One table of probes (script, arguments, what the message must name), each run as a user runs it: a subprocess
in a scratch dir. The probes share one tiny checkpoint and one set of bad files, made once for the module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import compose_config, run_script, train_in_process

from gptlab.interop import save_pretrained

NO_SUCH_GPU = "cuda" if not torch.cuda.is_available() else "cuda:99"  # a device this machine does not have


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step run's checkpoint (run/checkpoints/last.ckpt) and the bad files the probes name."""
    root = tmp_path_factory.mktemp("entry_errors")
    train_in_process(root / "run", "trainer.max_steps=2")
    ckpt = root / "run" / "checkpoints" / "last.ckpt"
    files = root / "files"
    files.mkdir()
    (files / "a_dir").mkdir()
    (files / "empty.txt").write_bytes(b"")
    (files / "binary.txt").write_bytes(b"\xff\xfe\x00\x01 not text")
    (files / "notes.ckpt").write_text("my notes, not a checkpoint\n")
    (files / "half.ckpt").write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    # A Hugging Face dir cut short in two ways: its config.json, and (in a whole export) its weights.
    from gptlab.checkpoint.reader import load_model

    model, _ = load_model(ckpt)
    save_pretrained(model, files / "hf_ok")
    (files / "hf_config").mkdir()
    config = (files / "hf_ok" / "config.json").read_text()
    (files / "hf_config" / "config.json").write_text(config[: len(config) // 2])
    (files / "hf_weights").mkdir()
    (files / "hf_weights" / "config.json").write_text(config)
    weights = (files / "hf_ok" / "model.safetensors").read_bytes()
    (files / "hf_weights" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    # Zero-shot task rows a user's file may hold: a null text, a HellaSwag item without endings.
    (files / "lambada_null.jsonl").write_text(json.dumps({"text": None}) + "\n")
    (files / "hellaswag_no_endings.jsonl").write_text(
        json.dumps({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": [], "label": 0}) + "\n")
    # A sweep dir whose one job's records are cut short or mangled.
    for name, summary, overrides in [("sweep_summary", '{"name": "tr', "- seed=1\n"),
                                     ("sweep_overrides", json.dumps({"tokens_per_step": 128}), "- seed=1\n- [a: b\n")]:
        job = root / name / "0"
        (job / ".hydra").mkdir(parents=True)
        (job / "run_summary.json").write_text(summary)
        (job / ".hydra" / "overrides.yaml").write_text(overrides)
    return root


# (id, script, arguments, words the error line must hold). {ckpt}: the run's last.ckpt; {f}: the files dir;
# {root}: the module's scratch dir. One or two probes an entry script, as a user runs it (each costs seconds of
# imports); the option-by-option probes of sample and eval run in-process below.
PROBES = [
    ("sample-device", "src/sample.py", ["ckpt_path={ckpt}", f"device={NO_SUCH_GPU}"], ["device="]),
    ("sample-hf-config-truncated", "src/sample.py", ["ckpt_path={f}/hf_config", "tokenizer=bytes"],
     ["hf_config/config.json", "truncated or corrupt"]),
    ("eval-accelerator", "src/eval.py", ["ckpt_path={ckpt}", "trainer.accelerator=cuda", "trainer.devices=99"],
     ["trainer.devices=99"]),
    ("eval-lambada-null-text", "src/eval.py",
     ["ckpt_path={ckpt}", "val_loss=false", "tasks=lambada", "task_data.lambada={f}/lambada_null.jsonl"],
     ["task_data.lambada", "row 1"]),
    ("export-out-file", "scripts/export_hf.py", ["ckpt_path={ckpt}", "out={f}/binary.txt"],
     ["out=", "not a directory"]),
    ("plan-tokens", "scripts/plan.py", ["tokens=lots"], ["tokens='lots'"]),
    ("plan-devices", "scripts/plan.py", ["tokens=1e9", "trainer.devices=0"], ["trainer.devices=0"]),
    ("prepare-cache_dir-file", "scripts/prepare_data.py", ["data.cache_dir={f}/binary.txt"],
     ["data.cache_dir=", "not a directory"]),
    ("report-summary-truncated", "scripts/ablation_report.py", ["{root}/sweep_summary"],
     ["sweep_summary/0/run_summary.json", "cannot be read"]),
    ("report-overrides-corrupt", "scripts/ablation_report.py", ["{root}/sweep_overrides"],
     ["sweep_overrides/0/.hydra/overrides.yaml", "cannot be read"]),
    ("fetch-ranks-cache-dir-file", "scripts/fetch_gpt2_ranks.py", ["--cache-dir", "{f}/binary.txt"],
     ["--cache-dir=", "not a directory"]),
    ("doctor-device", "scripts/doctor.py", ["--device", "tpu"], ["--device='tpu'"]),
    ("lm-eval-device", "src/gptlab/eval/lm_eval_adapter.py",
     ["--model_args", "ckpt_path={ckpt}", "--tasks", "lambada_openai", "--device", NO_SUCH_GPU], ["--device="]),
    ("lm-eval-no-ckpt", "src/gptlab/eval/lm_eval_adapter.py",
     ["--model_args", "tokenizer=bytes", "--tasks", "lambada_openai"], ["ckpt_path"]),
]


# Second probes of a script whose class another test also pins (task rows: test_task_rows.py): `-m slow` runs them.
SLOW_PROBES = {"plan-devices", "report-overrides-corrupt", "lm-eval-no-ckpt", "eval-lambada-null-text"}


@pytest.mark.parametrize("script,args,named", [
    pytest.param(*p[1:], id=p[0], marks=pytest.mark.slow if p[0] in SLOW_PROBES else ()) for p in PROBES])
def test_bad_input_is_one_message_and_exit_2(probe_dir: Path, script: str, args: list[str], named: list[str]) -> None:
    ckpt = probe_dir / "run" / "checkpoints" / "last.ckpt"
    argv = [a.format(ckpt=ckpt, f=probe_dir / "files", root=probe_dir) for a in args]
    proc = run_script(script, argv, cwd=probe_dir)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gptlab: error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for word in named:
        assert word.format(f=probe_dir / "files") in errors[0], errors[0]


# In-process: (config, overrides, words the ConfigError must hold); {ckpt} and {f} as above.
OPTION_PROBES = [
    ("sample", ["device=gpu0"], ["device='gpu0'"]),
    ("sample", ["num_samples=0"], ["num_samples=0"]),
    ("sample", ["top_k=abc"], ["top_k='abc'"]),
    ("sample", ["stop_at_eot=maybe"], ["stop_at_eot='maybe'"]),
    ("sample", ["prompt_file={f}/a_dir"], ["prompt_file=", "is a directory"]),
    ("sample", ["prompt_file={f}/binary.txt"], ["prompt_file=", "not UTF-8"]),
    ("sample", ["ckpt_path={f}/notes.ckpt"], ["notes.ckpt", "not a PyTorch checkpoint: it starts with 'my notes"]),
    ("sample", ["ckpt_path={f}/half.ckpt"], ["half.ckpt", "truncated or corrupt"]),
    ("sample", ["ckpt_path={f}/hf_weights", "tokenizer=bytes"], ["hf_weights/model.safetensors", "truncated"]),
    ("eval", ["task_batch_size=0"], ["task_batch_size=0"]),
    ("eval", ["data.batch_size=abc"], ["data.batch_size='abc'"]),
    ("eval", ["paths.output_dir={f}/binary.txt"], ["paths.output_dir=", "not a directory"]),
    ("eval", ["val_loss=false", "tasks=[hellaswag]", "task_data.hellaswag={f}/hellaswag_no_endings.jsonl"],
     ["task_data.hellaswag", "endings"]),
    ("eval", ["val_loss=false", "tasks=lambada", "task_data.lambada={f}/a_dir"], ["task_data.lambada"]),
    ("eval", ["data.block_size=512"], ["data.block_size=512", "model.block_size (32)"]),
    ("eval", ["trainer.limit_val_batches=abc"], ["trainer.limit_val_batches='abc'"]),
    ("eval", ["trainer.precision=transformer-engine"], ["trainer.precision='transformer-engine'"]),
]


@pytest.mark.parametrize("config,overrides,named", OPTION_PROBES, ids=[f"{p[0]}:{p[1][-1]}" for p in OPTION_PROBES])
def test_bad_option_is_a_config_error_naming_it(probe_dir: Path, config: str, overrides: list[str],
                                                named: list[str]) -> None:
    from gptlab.apps.evaluate import evaluate
    from gptlab.config.suggest import compose_message
    from gptlab.errors import ConfigError
    from gptlab.eval.sampling import sample

    f = probe_dir / "files"
    argv = [f"ckpt_path={probe_dir / 'run' / 'checkpoints' / 'last.ckpt'}", "max_new_tokens=2"] * (config == "sample")
    argv += [f"ckpt_path={probe_dir / 'run' / 'checkpoints' / 'last.ckpt'}",
             f"paths.output_dir={probe_dir / 'eval'}"] * (config == "eval")
    argv += [o.format(f=f) for o in overrides]
    try:  # a wrong type is refused while Hydra composes the typed config; the entry script words it the same way
        cfg = compose_config(argv, config_name=config)
    except Exception as compose_error:
        said = compose_message(compose_error)
        assert said is not None, compose_error
    else:
        with pytest.raises(ConfigError) as err:
            (sample if config == "sample" else evaluate)(cfg)
        said = str(err.value)
    for word in named:
        assert word in said, said


def test_lm_eval_adapter_runs_on_the_device_the_machine_has(probe_dir: Path, monkeypatch) -> None:
    """lm-eval's own --device default is cuda:0; without --device the adapter asks for what torch finds."""
    import lm_eval.__main__

    from gptlab.eval import lm_eval_adapter

    have = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    seen: list[list[str]] = []
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: seen.append(list(lm_eval_adapter.sys.argv)))
    ckpt = probe_dir / "run" / "checkpoints" / "last.ckpt"
    lm_eval_adapter.main(["--model_args", f"ckpt_path={ckpt}", "--tasks", "lambada_openai"])
    lm_eval_adapter.main(["--model_args", f"ckpt_path={ckpt}", "--tasks", "lambada_openai", "--device=cpu"])
    assert seen[0][-2:] == ["--device", have] and seen[1].count("--device=cpu") == 1 and "--device" not in seen[1]
    lm = lm_eval_adapter.GptlabLM(ckpt_path=str(ckpt))
    assert lm.device.type == have and next(lm.model.parameters()).device.type == have


@pytest.mark.parametrize("args,named", [
    (["--model_args", "ckpt_path={ckpt}", "--device", NO_SUCH_GPU], "--device="),
    (["--model_args", "ckpt_path={ckpt}.missing", "--device", "cpu"], "it does not exist"),
    (["--model_args", "ckpt_path={root}/files", "--device", "cpu"], "checkpoint(s) do not load"),
])
def test_lm_eval_refuses_device_and_checkpoint_before_indexing_its_tasks(probe_dir: Path, monkeypatch, capsys, args,
                                                                         named: str) -> None:
    """lm-eval indexes its thousands of task files (half a minute) before it builds the model: a mistyped --device
    or ckpt_path is refused before that, and with a task name lm-eval does not know."""
    import lm_eval.__main__

    from gptlab.eval import lm_eval_adapter

    started: list[bool] = []
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: started.append(True))
    argv = [a.format(ckpt=probe_dir / "run" / "checkpoints" / "last.ckpt", root=probe_dir) for a in args]
    with pytest.raises(SystemExit) as stop:
        lm_eval_adapter.main([*argv, "--tasks", "no_such_task"])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and said.startswith("gptlab: error: ") and named in said, said
    assert not started


# A required argument left out, or one no entry point takes, for every entry point: (id, script, arguments, words
# the one error line must hold). Each runs in an empty dir, which must stay empty.
MISSING_PROBES = [
    ("train", "src/train.py", ["model.norm=sideways"], ["model.norm"]),
    ("eval", "src/eval.py", [], ["ckpt_path", "ckpt_path=<value>"]),
    ("eval-no-such-ckpt", "src/eval.py", ["ckpt_path=nosuch.ckpt"], ["ckpt_path='nosuch.ckpt'"]),  # no evals/ dir left
    ("sample", "src/sample.py", [], ["ckpt_path"]),
    ("export_hf", "scripts/export_hf.py", [], ["ckpt_path", "out=<value>"]),
    ("plan", "scripts/plan.py", [], ["tokens"]),
    ("prepare_data", "scripts/prepare_data.py", ["tokenizer=nosuch"], ["tokenizer=nosuch"]),
    ("ablation_report", "scripts/ablation_report.py", [], ["sweep_dir", "--help"]),
    ("convert_checkpoint", "scripts/convert_checkpoint.py", [], ["checkpoint, out", "--help"]),
    ("fetch_gpt2_ranks", "scripts/fetch_gpt2_ranks.py", ["--cache_dir", "x"], ["--cache_dir", "--help"]),
    ("doctor", "scripts/doctor.py", ["--devices", "cpu"], ["--devices", "--help"]),
    ("fault_drill", "scripts/fault_drill.py", ["--kills", "many"], ["--kills", "'many'", "e.g. --kills=20"]),
    ("preemption_drill", "scripts/preemption_drill.py", ["--repeats"], ["--repeats", "--help"]),
    # a `+key` the entry point would not read (train's own: test_config_check.py)
    ("eval-appended", "src/eval.py", ["ckpt_path=nosuch.ckpt", "+val_los=1"], ["val_loss?"]),
    ("sample-appended", "src/sample.py", ["+foo=1"], ["Drop foo: nothing reads it"]),
    ("export_hf-appended", "scripts/export_hf.py", ["ckpt_path=a", "out=b", "+overwrit=true"], ["overwrite?"]),
    ("plan-appended", "scripts/plan.py", ["+tokenz=3e9"], ["tokens?"]),
    ("prepare_data-appended", "scripts/prepare_data.py", ["+foo=1"], ["Drop foo: nothing reads it"]),
]


@pytest.mark.parametrize("script,args,named", [pytest.param(*p[1:], id=p[0]) for p in MISSING_PROBES])
def test_a_missing_or_unknown_argument_is_one_message_exit_2_and_writes_nothing(
        tmp_path: Path, script: str, args: list[str], named: list[str]) -> None:
    proc = run_script(script, args, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in output, output[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gptlab: error: ")]
    assert len(errors) == 1 and not proc.stderr.startswith("usage:"), proc.stderr[-3000:]
    for word in named:
        assert word in errors[0], errors[0]
    assert list(tmp_path.iterdir()) == [], "written: " + ", ".join(str(p) for p in tmp_path.rglob("*"))
