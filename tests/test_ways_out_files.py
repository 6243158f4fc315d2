"""Every way out works when followed (issue 33, item 2) for the files a run leaves and other tools read: checkpoints
(eval.py, sample.py, train's ckpt_path, scripts/convert_checkpoint.py), Hugging Face directories (sample.py, the
Python API, scripts/export_hf.py), eval.py's task files and the lm-evaluation-harness adapter, and a full disk.

Each case is a command a user types on tiny files made here (a 1-layer checkpoint, cut-short or foreign copies of it,
task rows); it runs the entry point's own code in-process as far as its work, where it is refused. A way out the
message offers as an override is typed and followed by tests/ways_out.follow; one it offers as something to do (run
another tool, rewrite a file it names, free space) is done by the test, and the command then passes or refuses anew
with a new, true message. `test_every_raise_of_the_files_is_reached_by_a_case` checks that the cases reach every
user error that these modules raise (ways_out.AREAS).
"""

from __future__ import annotations

import atexit
import errno
import functools
import importlib.util
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Optional
from unittest import mock

import lightning as L
import pytest
import torch
import ways_out
from helpers import ROOT, compose_config
from safetensors.torch import load_file, save_file
from ways_out import RUN_DIR, Refusal, as_refusal, follow, tiny_checkpoint, unreached

from gptlab.apps import evaluate as evaluate_app
from gptlab.config.suggest import compose_message
from gptlab.errors import ConfigError
from gptlab.interop import from_pretrained, save_pretrained
from gptlab.launch.hydra_callbacks import missing_message, missing_values
from gptlab.model import GPT, GPTConfig

# The files the cases name, made once per process (the refusals are cached by command): one dir per process (xdist runs
# several), removed at its exit.
FILES = RUN_DIR.parent / f"files-{os.getpid()}"
atexit.register(shutil.rmtree, FILES, True)
FIXTURES = Path(__file__).parent / "fixtures" / "zeroshot"
LAMBADA, HELLASWAG = FIXTURES / "lambada.jsonl", FIXTURES / "hellaswag.jsonl"
DEPTH = 4


def _script(name: str) -> Any:
    """scripts/<name>.py as a module, to run its task in-process."""
    spec = importlib.util.spec_from_file_location(f"gptlab_script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPORT, CONVERT = _script("export_hf"), _script("convert_checkpoint")


def _save_ckpt(path: Path, model: GPT, hparams: Optional[dict] = None, **extra: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "hyper_parameters": hparams if hparams is not None else {"model": model.config.to_dict()}, **extra},
               path)
    return path


@functools.cache
def files() -> Path:
    """The checkpoints, Hugging Face directories and task files the cases name, under FILES."""
    FILES.mkdir(parents=True)
    tiny = torch.load(tiny_checkpoint(), weights_only=True)["hyper_parameters"]
    # the tiny model, with a context long enough for the zero-shot fixtures' rows
    model = GPT(GPTConfig.from_dict({**tiny["model"], "block_size": 256}))
    ckpt = {"hyper_parameters": {**tiny, "model": model.config.to_dict()},
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}
    # a run's checkpoint, with its optimizer states: what train can continue
    _save_ckpt(FILES / "run" / "checkpoints" / "last.ckpt", model, ckpt["hyper_parameters"], optimizer_states=[{}])
    (FILES / "empty_dir").mkdir()
    (FILES / "notes.ckpt").write_text("my notes, not a checkpoint\n")
    _save_ckpt(FILES / "no_config.ckpt", model, {})
    _save_ckpt(FILES / "no_tokenizer.ckpt", model)
    for name, overrides in [("no_final_norm", {"final_norm": False}),
                            ("rope_layernorm", {"pos_emb": "rope", "qk_norm": True})]:
        other = GPT(GPTConfig.from_dict({**model.config.to_dict(), **overrides}))
        _save_ckpt(FILES / f"{name}.ckpt", other, {**ckpt["hyper_parameters"], "model": other.config.to_dict()})
    # a sharded checkpoint folder as trainer=fsdp writes it (DCP's files and Lightning's meta.pt)
    import torch.distributed.checkpoint as dcp

    sharded = FILES / "sharded" / "last.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled, ... single process"
        dcp.save({"state_dict": ckpt["state_dict"]}, checkpoint_id=str(sharded))
    torch.save({"hyper_parameters": ckpt["hyper_parameters"], "global_step": 3}, sharded / "meta.pt")
    # Hugging Face directories: a whole export, and copies cut short or foreign
    save_pretrained(model, FILES / "hf")
    config = json.loads((FILES / "hf" / "config.json").read_text())
    weights = load_file(FILES / "hf" / "model.safetensors")
    hf_dir = _hf_dir
    hf_dir("hf_config_cut", (FILES / "hf" / "config.json").read_text()[:40])
    hf_dir("hf_config_list", "[1, 2]")
    hf_dir("hf_bert", {**config, "model_type": "bert"}, weights)
    hf_dir("hf_no_weights", config)
    hf_dir("hf_weights_cut", config)
    data = (FILES / "hf" / "model.safetensors").read_bytes()
    (FILES / "hf_weights_cut" / "model.safetensors").write_bytes(data[: len(data) // 2])
    hf_dir("hf_no_n_layer", {k: v for k, v in config.items() if k != "n_layer"}, weights)
    (FILES / "hf_no_config").mkdir()
    shutil.copy(FILES / "hf" / "model.safetensors", FILES / "hf_no_config")
    neo_config, neo_weights = _gpt_neo(model)
    hf_dir("neo_ok", neo_config, neo_weights)
    hf_dir("neo_missing_key", neo_config, {k: v for k, v in neo_weights.items() if k != "transformer.ln_f.bias"})
    hf_dir("neo_extra_key", neo_config, {**neo_weights, "transformer.h.0.attn.attention.bogus": torch.zeros(1)})
    hf_dir("neo_activation", {**neo_config, "activation_function": "swish"}, neo_weights)
    hf_dir("neo_types", {**neo_config, "attention_types": [[["global", "sparse"], 1]]}, neo_weights)
    # eval.py's task files: rows a user's file may hold
    rows = {"lambada_null_text": {"text": None}, "lambada_one_word": {"text": "Hello"},
            "lambada_long_word": {"text": "The word is " + "x" * 300},
            "hellaswag_one_ending": {"ctx": "a", "endings": ["b"], "label": 0},
            "hellaswag_label": {"ctx": "a", "endings": ["b", "c"], "label": 2},
            "hellaswag_label_digit": {"ctx": "a", "endings": ["b", "c"], "label": "²"}}
    for name, row in rows.items():
        (FILES / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
    (FILES / "lambada_broken.jsonl").write_text('{"text": "a b"\n')
    return FILES


def _hf_dir(name: str, config: Any, weights: Optional[dict] = None) -> Path:
    directory = FILES / name
    directory.mkdir()
    (directory / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if weights is not None:
        save_file(weights, directory / "model.safetensors")
    return directory


def _gpt_neo(model: GPT) -> tuple[dict, dict]:
    """GPT-Neo's config.json and GPTNeoForCausalLM's weights of the same shape as `model` (random weights)."""
    c = model.config
    config = {"model_type": "gpt_neo", "vocab_size": c.vocab_size, "max_position_embeddings": c.block_size,
              "num_layers": c.n_layer, "num_heads": c.n_head, "hidden_size": c.n_embd,
              "attention_types": [[["global"], c.n_layer]], "window_size": 8, "activation_function": "gelu_new"}
    d, t = c.n_embd, "transformer."
    weights = {f"{t}wte.weight": torch.randn(c.vocab_size, d), f"{t}wpe.weight": torch.randn(c.block_size, d),
               f"{t}ln_f.weight": torch.ones(d), f"{t}ln_f.bias": torch.zeros(d)}
    for i in range(c.n_layer):
        h = f"{t}h.{i}."
        weights |= {f"{h}attn.attention.{p}_proj.weight": torch.randn(d, d) for p in "qkv"}
        weights |= {f"{h}attn.attention.out_proj.weight": torch.randn(d, d),
                    f"{h}attn.attention.out_proj.bias": torch.zeros(d),
                    f"{h}mlp.c_fc.weight": torch.randn(4 * d, d), f"{h}mlp.c_fc.bias": torch.zeros(4 * d),
                    f"{h}mlp.c_proj.weight": torch.randn(d, 4 * d), f"{h}mlp.c_proj.bias": torch.zeros(d)}
        weights |= {f"{h}{ln}.{p}": torch.ones(d) if p == "weight" else torch.zeros(d)
                    for ln in ("ln_1", "ln_2") for p in ("weight", "bias")}
    return config, weights


# ---- the entry points, each run in-process up to where it is refused or its work is done ------------------------
def _composed(config_name: str, command: tuple[str, ...]) -> Any:
    """The config `python <script> <command>` composes, or its refusal (Hydra's compose error, a missing value)."""
    try:
        cfg = compose_config(list(command), config_name=config_name)
    except Exception as err:
        message = compose_message(err)
        if message is None:
            raise
        return Refusal(message, None)
    missing = missing_values(cfg)
    return Refusal(missing_message(missing, config_name), None) if missing else cfg


# message -> the raise sites of the user errors a refusal re-words (tasks.py names the file and row of task_rows'
# refusal), which the refusal reaches too
INNER_SITES: dict[str, set] = {}


def _refused(work: Callable[[], Any]) -> Optional[Refusal]:
    try:
        work()
    except Exception as err:
        refused = as_refusal(err)
        inner, seen = set(), err.__context__
        while seen is not None:
            if isinstance(seen, ConfigError):
                inner.add(as_refusal(seen).site)
            seen = seen.__cause__ or seen.__context__
        INNER_SITES[refused.message] = inner
        return refused
    return None


@functools.cache
def eval_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """`python src/eval.py <command>` through its task scores and eval.json (into EVAL_OUT); the validation loss is
    not computed (ways_out.app_refusal follows what comes before it)."""
    cfg = _composed("eval", (*command, f"paths.output_dir={EVAL_OUT}"))
    if isinstance(cfg, Refusal):
        return cfg
    with mock.patch.object(evaluate_app, "GPTLitModule", lambda *a, **k: None), \
            mock.patch.object(L.Trainer, "validate", lambda *a, **k: [{"val/loss": 1.0, "val/bpb": 1.0}]):
        return _refused(lambda: evaluate_app.evaluate(cfg))


EVAL_OUT = FILES / "eval-out"


@functools.cache
def export_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """`python scripts/export_hf.py <command>`: the script's task, in-process."""
    cfg = _composed("export_hf", command)
    if isinstance(cfg, Refusal):
        return cfg
    return _refused(lambda: EXPORT.main.__wrapped__.__wrapped__(cfg))


def convert_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    """`python scripts/convert_checkpoint.py <command>`: the script's main, in-process."""
    with mock.patch.object(sys, "argv", ["scripts/convert_checkpoint.py", *command]):
        return _refused(CONVERT.main.__wrapped__)


def sample_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    return ways_out.app_refusal("sample", command)


def train_refusal(command: tuple[str, ...]) -> Optional[Refusal]:
    return ways_out.refusal(command)


# What the words ask for by a placeholder (`ckpt_path=<...>`), typed as a user would: a file that is one.
STAND_INS = {"ckpt_path": str(FILES / "run"), "task_data.lambada": str(LAMBADA),
             "task_data.hellaswag": str(HELLASWAG), "tokenizer": "bytes"}
TRAIN_STAND_INS = {"ckpt_path": str(FILES / "train_run")}
RANKS = ROOT / "data" / "cache" / "tiktoken" / "gpt2.tiktoken"  # tests/conftest.py's gpt2_ranks fetches it


@functools.cache
def train_checkpoints() -> tuple[Path, Path]:
    """Checkpoints of the model `python src/train.py` (no overrides) trains: a run's, with optimizer states, and the
    folder trainer=fsdp writes (DCP's files and Lightning's meta.pt)."""
    import torch.distributed.checkpoint as dcp

    from gptlab.preflight import early_checks

    files()
    cfg = ways_out.compose(())
    model = GPT(early_checks._check_before_run(cfg).model_cfg)
    run = _save_ckpt(FILES / "train_run" / "checkpoints" / "last.ckpt", model, optimizer_states=[{}],
                     hparams={"model": model.config.to_dict(),
                              "run": {"optimizer": {"_target_": cfg.optimizer._target_}}})
    sharded = FILES / "train_sharded" / "last.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled, ... single process"
        dcp.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, checkpoint_id=str(sharded))
    torch.save({"hyper_parameters": {"model": model.config.to_dict()}, "global_step": 3}, sharded / "meta.pt")
    return run, sharded


# ---- the cases: (entry point, command) ------------------------------------------------------------------------
F = str(FILES)
CK = f"ckpt_path={F}/run/checkpoints/last.ckpt"
TASK = ("val_loss=false",)
CASES: dict[str, list[tuple[str, ...]]] = {
    "eval": [
        (f"ckpt_path={F}/notes.ckpt",), (f"ckpt_path={F}/empty_dir",), (f"ckpt_path={F}/no_config.ckpt",),
        (f"ckpt_path={F}/nosuch.ckpt",), (CK, "tokenizer=gpt2"),
        (f"ckpt_path={F}/no_tokenizer.ckpt", "tokenizer=gpt2", f"tokenizer.ranks_file={RANKS}"),
        (CK, *TASK, "tasks=[lambada]", f"task_data.lambada={F}/nosuch.jsonl"),
        (CK, *TASK, "tasks=[lambada]", f"task_data.lambada={F}/lambada_broken.jsonl"),
        (CK, *TASK, "tasks=[lambada]", f"task_data.lambada={F}/lambada_null_text.jsonl"),
        (CK, *TASK, "tasks=[lambada]", f"task_data.lambada={F}/lambada_one_word.jsonl"),
        (CK, *TASK, "tasks=[hellaswag]", f"task_data.hellaswag={F}/hellaswag_one_ending.jsonl"),
        (CK, *TASK, "tasks=[hellaswag]", f"task_data.hellaswag={F}/hellaswag_label.jsonl"),
        (CK, *TASK, "tasks=[hellaswag]", f"task_data.hellaswag={F}/hellaswag_label_digit.jsonl"),
    ],
    "export": [(f"ckpt_path={F}/no_tokenizer.ckpt", f"out={F}/exported/c"),
               (CK, f"out={F}/exported/t", "tokenizer=gpt2", f"tokenizer.ranks_file={RANKS}"),
               (f"ckpt_path={F}/no_tokenizer.ckpt", f"out={F}/exported/v", "tokenizer=gpt2",
                f"tokenizer.ranks_file={RANKS}")],
    "train": [
        (f"ckpt_path={F}/train_sharded/last.ckpt",), (f"ckpt_path={F}/no_tokenizer.ckpt",),
        (f"ckpt_path={F}/train_run/checkpoints/last.ckpt", "model.n_layer=3"),
        # another optimizer than the run's (adamw): Muon's state does not load, SGD's fails at its first step
        (f"ckpt_path={F}/train_run/checkpoints/last.ckpt", "optimizer=muon"),
        (f"ckpt_path={F}/train_run/checkpoints/last.ckpt", "optimizer=sgd"),
    ],
}
REFUSE = {"eval": eval_refusal, "sample": sample_refusal, "export": export_refusal, "train": train_refusal}


def _ids(value: Any) -> str:
    return value if isinstance(value, str) else " ".join(value).replace(F, "<files>")


@pytest.mark.parametrize("entry,command", [(e, c) for e, listed in CASES.items() for c in listed], ids=_ids)
def test_each_files_refusals_ways_out_work(entry: str, command: tuple[str, ...], gpt2_ranks) -> None:
    files(), train_checkpoints()
    assert gpt2_ranks == RANKS
    refused = REFUSE[entry](command)
    assert refused is not None, f"{entry} {' '.join(command)} is not refused"
    walk = follow(command, DEPTH, refuse=REFUSE[entry], stand_ins=TRAIN_STAND_INS if entry == "train" else STAND_INS)
    assert not walk.broken, "\n".join(walk.broken)


# ---- ways out that are something to do, not an override to type: the test does it --------------------------------
def _again(refuse: Callable, command: tuple[str, ...]) -> Optional[Refusal]:
    """`refuse(command)` run anew (not its cached answer): the files it reads have changed."""
    return getattr(refuse, "__wrapped__", refuse)(command)


def _sample_again(command: tuple[str, ...]) -> Optional[Refusal]:
    return ways_out.app_refusal.__wrapped__("sample", command)


# A Hugging Face directory sample.py (or from_pretrained) refuses: what its message says to do, done here.
HF_CASES = {"hf_config_cut": "export or download the directory again",
            "hf_config_list": "export the directory again",
            "hf_no_weights": "export or download the directory again",
            "hf_weights_cut": "export or download the directory again",
            "hf_no_n_layer": "export or download the directory again",
            "hf_bert": "give a directory of model_type gpt2, gpt_neo, llama, openai-gpt",
            "neo_missing_key": "download the directory again", "neo_extra_key": "download the directory again",
            "neo_types": "download the directory again"}


@pytest.mark.parametrize("name", HF_CASES)
def test_a_broken_hugging_face_directorys_way_out_works(name: str, tmp_path: Path) -> None:
    files()
    directory = tmp_path / name
    shutil.copytree(FILES / name, directory)
    command = (f"ckpt_path={directory}", "max_new_tokens=2", "tokenizer=bytes")
    refused = _sample_again(command)
    assert refused is not None and HF_CASES[name] in refused.message, refused
    if "export" in HF_CASES[name]:  # `python scripts/export_hf.py ckpt_path=<the run> out=<dir> overwrite=true`
        assert export_refusal((CK, f"out={directory}", "overwrite=true")) is None
    else:  # a whole directory of a kind gptlab reads where the broken one was
        shutil.rmtree(directory)
        shutil.copytree(FILES / ("neo_ok" if name.startswith("neo") else "hf"), directory)
    assert _sample_again(command) is None, _sample_again(command)


def test_a_directory_without_config_json_names_the_directory_to_give() -> None:
    """from_pretrained, as docs/models.md calls it (sample.py takes such a dir for a run dir: reader's refusal)."""
    files()
    with pytest.raises(ConfigError, match="give the directory that scripts/export_hf.py or save_pretrained wrote"):
        from_pretrained(FILES / "hf_no_config")
    assert isinstance(from_pretrained(FILES / "hf"), GPT)


def test_a_model_gptlab_cannot_run_says_so() -> None:
    """No way out exists for a GPT-Neo activation gptlab lacks: the message says that, and offers none that fails."""
    files()
    refused = sample_refusal((f"ckpt_path={F}/neo_activation", "max_new_tokens=2", "tokenizer=bytes"))
    assert refused is not None and refused.message.endswith("gptlab cannot run this model."), refused


@pytest.mark.parametrize("name", ["no_final_norm", "rope_layernorm"])
def test_a_checkpoint_hugging_face_cannot_hold_is_read_by_sample_and_eval(name: str) -> None:
    files()
    refused = export_refusal((f"ckpt_path={F}/{name}.ckpt", f"out={F}/exported/{name}"))
    assert refused is not None and refused.message.endswith("sample.py and eval.py read the checkpoint as it is."), \
        refused
    assert not (FILES / "exported" / name).exists()  # nothing written
    assert sample_refusal((f"ckpt_path={F}/{name}.ckpt", "max_new_tokens=2")) is None
    assert eval_refusal((f"ckpt_path={F}/{name}.ckpt",)) is None


def test_a_task_row_longer_than_the_context_is_scored_once_shortened(tmp_path: Path) -> None:
    """Refused before anything is scored (gptlab.eval.zeroshot.check_fits), and scored once the row is short."""
    files()
    rows = tmp_path / "lambada.jsonl"
    shutil.copy(FILES / "lambada_long_word.jsonl", rows)
    command = (CK, *TASK, "tasks=[lambada]", f"task_data.lambada={rows}")
    refused = eval_refusal(command)
    assert refused is not None and "task_data.lambada=<a file whose continuations fit> (e.g. without that row)" in \
        refused.message, refused
    rows.write_text(json.dumps({"text": "The word is " + "x" * 30}) + "\n")
    assert _again(eval_refusal, command) is None


# ---- scripts/convert_checkpoint.py ------------------------------------------------------------------------------
def test_convert_checkpoints_ways_out_work(tmp_path: Path) -> None:
    """Each refusal of the converter, and what its words say to do."""
    files()
    sharded, out = f"{F}/sharded/last.ckpt", str(tmp_path / "model.ckpt")
    # each says "give <...> as the checkpoint argument": positional ("checkpoint=<x>" typed was a path "checkpoint=x")
    for wrong in (f"{F}/nosuch.ckpt", f"{F}/empty_dir", f"{F}/notes.ckpt"):
        refused = convert_refusal((wrong, out))
        assert refused is not None and "> as the checkpoint argument" in refused.message, refused
        assert "checkpoint=" not in refused.message, refused
    one_file = convert_refusal((CK[len("ckpt_path="):], out))  # "eval, sample and export read it as it is"
    assert one_file is not None and "read it as it is" in one_file.message
    assert eval_refusal((CK,)) is None
    a_dir = convert_refusal((sharded, str(tmp_path)))  # "give the path of the file to write"
    assert a_dir is not None and "give the path of the file to write" in a_dir.message, a_dir
    (tmp_path / "a_file").write_text("")
    unwritable = convert_refusal((sharded, str(tmp_path / "a_file" / "model.ckpt")))
    assert unwritable is not None and "choose a path you can write to" in unwritable.message, unwritable
    assert convert_refusal((sharded, out)) is None  # each way out: another checkpoint, a file path one can write
    assert sample_refusal((f"ckpt_path={out}", "max_new_tokens=2")) is None
    exists = convert_refusal((sharded, out))  # written once: --overwrite replaces it
    assert exists is not None and "--overwrite" in exists.message, exists
    assert convert_refusal((sharded, out, "--overwrite")) is None


def test_a_full_disk_says_free_space_and_run_again_which_works(tmp_path: Path) -> None:
    """atomic.DiskFullError for the converter's file (the same for every file gptlab writes; a training run's
    advice, resume=auto, is followed by tests/test_checkpoint_faults.py)."""
    files()
    command = (f"{F}/sharded/last.ckpt", str(tmp_path / "model.ckpt"))

    def no_space(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        f.write(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    with mock.patch.object(torch, "save", no_space):
        refused = convert_refusal(command)
    assert refused is not None and refused.message.startswith("disk full: could not write"), refused
    assert refused.message.endswith("Free some space and run again."), refused
    assert list(tmp_path.iterdir()) == []  # no partial file, no temp file
    assert convert_refusal(command) is None  # space freed: the same command
    assert sample_refusal((f"ckpt_path={tmp_path / 'model.ckpt'}", "max_new_tokens=2")) is None


# ---- the lm-evaluation-harness adapter (python -m gptlab.eval.lm_eval_adapter) ----------------------------------
def _lm_refusal(**model_args: Any) -> Optional[Refusal]:
    from gptlab.eval.lm_eval_adapter import GptlabLM

    return _refused(lambda: GptlabLM(**model_args))


def test_lm_eval_adapters_ways_out_work() -> None:
    from lm_eval.api.instance import Instance

    from gptlab.eval.lm_eval_adapter import GptlabLM, parse_batch_size

    files()
    no_ckpt = _lm_refusal(tokenizer="bytes")  # "pass --model_args ckpt_path=<run dir or .ckpt>"
    assert no_ckpt is not None and "--model_args ckpt_path=<" in no_ckpt.message
    assert _lm_refusal(ckpt_path=f"{F}/run", device="cpu") is None
    no_tokenizer = _lm_refusal(ckpt_path=f"{F}/no_tokenizer.ckpt", device="cpu")  # "model_args tokenizer=bytes"
    assert no_tokenizer is not None and "pass model_args tokenizer=bytes" in no_tokenizer.message
    assert _lm_refusal(ckpt_path=f"{F}/no_tokenizer.ckpt", tokenizer="bytes", device="cpu") is None
    batch = _refused(lambda: parse_batch_size("0"))  # "use e.g. --batch_size 16 or auto"
    assert batch is not None and "--batch_size 16 or auto" in batch.message
    assert parse_batch_size("16") == 16 and parse_batch_size("auto") == 16
    lm = GptlabLM(ckpt_path=f"{F}/run", device="cpu")  # a task whose example has no target: "needs a target"
    empty = _refused(lambda: lm.loglikelihood([Instance("loglikelihood", {}, ("The capital of", ""), 0)]))
    assert empty is not None and "every example needs a target" in empty.message, empty
    assert len(lm.loglikelihood([Instance("loglikelihood", {}, ("The capital of", " France"), 0)])) == 1


@functools.cache
def _task_manager(task_manager: type, include_path: Optional[str]) -> Any:
    return task_manager(include_path=include_path)


@functools.cache
def lm_eval_refusal(args: tuple[str, ...]) -> Optional[Refusal]:
    """`python -m gptlab.eval.lm_eval_adapter <args>` in-process, up to lm-eval's evaluation. lm-eval indexes its
    thousands of task files for each command (~10 s): here once for all of them."""
    import datasets
    import lm_eval.tasks

    from gptlab.eval import lm_eval_adapter

    real = lm_eval.tasks.TaskManager

    def shared(include_path: Optional[str] = None, metadata: Optional[dict] = None) -> Any:
        return _task_manager(real, include_path)  # metadata (model_args, for task templates): no refusal reads it

    # This machine cannot reach the Hub: fail at once, as datasets does offline (not after its retries' minute)
    offline = ConnectionError("Couldn't reach 'EleutherAI/lambada_openai' on the Hub (LocalEntryNotFoundError)")
    with mock.patch.object(sys, "argv", ["lm_eval_adapter"]), \
            mock.patch.object(datasets, "load_dataset", side_effect=offline), \
            mock.patch.object(lm_eval.tasks, "TaskManager", shared):
        return _refused(lambda: lm_eval_adapter.main.__wrapped__(list(args)))


LM_EVAL_CASES = {(): "pass --tasks <name>",
                 ("--model_args", f"ckpt_path={F}/run", "--tasks", "lambada_bogus", "--device", "cpu"):
                     "`lm-eval ls tasks` lists the tasks",
                 # the example a user follows offline, whose data lm-eval fetches from the Hub
                 ("--model_args", f"ckpt_path={F}/run", "--tasks", "lambada_openai", "--device", "cpu"):
                     "--include_path <a dir of their YAML files>"}


def test_lm_eval_adapters_task_refusals() -> None:
    """No --tasks, or an unknown one: one message that names what to pass (lm-eval indexes its tasks: ~9 s each).
    Running a task as told is tests/test_lm_eval_adapter.py's end-to-end test; `lm-eval ls tasks` is lm-eval's."""
    files()
    for args, words in LM_EVAL_CASES.items():
        refused = lm_eval_refusal(args)
        assert refused is not None and words in refused.message, refused
    # `--tasks lambada_openai` as the first message says: what is missing next, or the offline message above
    no_ckpt = lm_eval_refusal(("--tasks", "lambada_openai", "--device", "cpu"))
    assert no_ckpt is not None and "pass --model_args ckpt_path=<" in no_ckpt.message, no_ckpt


# ---- every raise of these modules is reached -------------------------------------------------------------------
# Raises no command on this machine reaches, each with the reason.
UNREACHED = {
    # crafted files, in tests/test_recorded_code.py: the way out, GPTLAB_TRUSTED_TARGETS, is an environment variable
    # (test_a_user_trusts_their_own_class_by_name follows it), which these command-line walks do not type
    ("recorded.py", "records the {kind} _target_"): "a file that records a foreign _target_",
    ("execution/fsdp_strategy.py", "cannot be read"): "an index swapped after resume's check of the same file",
    ("eval/loading.py", "does not record the tokenizer"): "gptlab.load (Python, no command line) on a checkpoint "
                                                          "from before runs recorded their tokenizer",
    ("checkpoint/convert.py", "is a directory; give the path"): "scripts/convert_checkpoint.py's check_new_file "
                                                                 "refuses a dir first (runs/write_targets.py)",
    ("eval/scoring.py", "must be a positive integer"): "every caller checks its batch size first (eval.py's "
                                                       "task_batch_size, lm-eval's --batch_size, the callback's)",
    ("eval/tasks.py", "does not have the fields of"): "task_rows.CHECKS checks every field an example reads first",
    ("eval/scoring.py", "is longer than the model's context"): "eval and training's zero-shot callback check every "
                                                               "row first (gptlab.eval.zeroshot.check_fits)",
}


def _hand_sites(tmp_path: Path) -> set:
    """The raise sites of the refusals the tests above follow by hand."""
    sites = {sample_refusal((f"ckpt_path={F}/{name}", "max_new_tokens=2", "tokenizer=bytes")).site
             for name in (*HF_CASES, "neo_activation")}
    sites |= {export_refusal((f"ckpt_path={F}/{name}.ckpt", f"out={F}/exported/{name}")).site
              for name in ("no_final_norm", "rope_layernorm")}
    sites.add(eval_refusal((CK, *TASK, "tasks=[lambada]", f"task_data.lambada={F}/lambada_long_word.jsonl")).site)
    sharded = f"{F}/sharded/last.ckpt"
    sites |= {convert_refusal(c).site for c in [(CK[len("ckpt_path="):], str(tmp_path / "a.ckpt")),
                                                  (sharded, str(tmp_path / "a_file" / "x.ckpt"))]}
    with mock.patch.object(torch, "save", side_effect=OSError(errno.ENOSPC, "No space left on device")):
        sites.add(convert_refusal((sharded, str(tmp_path / "b.ckpt"))).site)
    sites |= {lm_eval_refusal(args).site for args in LM_EVAL_CASES}
    from lm_eval.api.instance import Instance

    from gptlab.eval.lm_eval_adapter import GptlabLM, parse_batch_size

    sites |= {_lm_refusal(tokenizer="bytes").site, _lm_refusal(ckpt_path=f"{F}/no_tokenizer.ckpt").site,
              _refused(lambda: parse_batch_size("0")).site}

    lm = GptlabLM(ckpt_path=f"{F}/run", device="cpu")
    sites.add(_refused(lambda: lm.loglikelihood([Instance("loglikelihood", {}, ("a", ""), 0)])).site)
    try:
        from_pretrained(FILES / "hf_no_config")
    except ConfigError as err:
        sites.add(as_refusal(err).site)
    return sites


def test_every_raise_of_the_files_is_reached_by_a_case(tmp_path: Path, gpt2_ranks) -> None:
    """A user error added to these modules without a case here (or in UNREACHED, with why) fails this test."""
    files(), train_checkpoints()
    (tmp_path / "a_file").write_text("")
    refusals = [REFUSE[entry](c) for entry, listed in CASES.items() for c in listed]
    reached = {r.site for r in refusals} | _hand_sites(tmp_path)
    reached |= {site for r in refusals for site in INNER_SITES.get(r.message, ())}
    missing = unreached(reached, UNREACHED, ways_out.AREAS[Path(__file__).name])
    assert not missing, "raises no case reaches:\n" + "\n".join(missing)


def test_a_sharded_checkpoints_offered_commands_give_what_train_continues(tmp_path: Path) -> None:
    """A `python scripts/convert_checkpoint.py ...` the sharded refusal offers is run as written; train must then take
    its file (a converted file holds the weights only, which train refuses: so the refusal must not offer one)."""
    train_checkpoints()
    sharded = f"{F}/train_sharded/last.ckpt"
    refused = train_refusal((f"ckpt_path={sharded}",))
    assert refused is not None and "trainer=fsdp" in refused.message
    for command in ways_out.ways_out(refused.message, (f"ckpt_path={sharded}",)).commands:
        words = command.split()
        assert words[1] == "scripts/convert_checkpoint.py", command
        out = tmp_path / "converted.ckpt"
        assert convert_refusal((words[2], str(out))) is None
        assert ways_out.refusal.__wrapped__((f"ckpt_path={out}",)) is None, "train refuses the file it was told to make"


def test_a_full_disk_during_export_then_run_again_as_told(tmp_path: Path) -> None:
    """The disk fills after model.safetensors is written: the export leaves nothing (not the weights without their
    config and tokenizer), so "Free some space and run again" works as typed. Over an earlier export
    (overwrite=true), a full disk leaves that export's files as they were, whole."""
    files()
    out = tmp_path / "hf"
    command = (CK, f"out={out}")
    write_text = Path.write_text

    def no_space(self: Path, *args: Any, **kwargs: Any) -> int:
        if out in self.parents:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(self, *args, **kwargs)

    with mock.patch.object(Path, "write_text", no_space):
        refused = export_refusal(command)
    assert refused is not None and refused.message.endswith("Free some space and run again."), refused
    assert not out.exists()  # made by the export, and removed with the little it had written
    assert export_refusal.__wrapped__(command) is None  # run again, as told
    assert _sample_again((f"ckpt_path={out}", "max_new_tokens=2")) is None
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "README.md").write_text("the user's own file\n")
    with mock.patch.object(Path, "write_text", no_space):
        refused = export_refusal.__wrapped__((*command, "overwrite=true"))
    assert refused is not None and refused.message.endswith("Free some space and run again."), refused
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "README.md"} == before
    assert (out / "README.md").read_text() == "the user's own file\n"
