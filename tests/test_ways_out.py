"""Every way out a config or machine refusal offers works when followed (issue 33, item 2), over refusals listed from
the code, not by hand: every schema field that has a range check (gptlab.config.schemas, config.callbacks, and the
Trainer arguments a user may append), every GPTConfig field, every cross-field rule of gptlab.config.rules, every
refused row of gptlab.preflight.option_relevance, and, through the `raise` statements of the check modules, every
other refusal (the early checks, resume, the machine guards, Hydra's compose errors as gptlab words them). A new rule
or raise without a case here fails `test_every_*`.

Each case's command is refused; tests/ways_out.py reads the message, types each way out it offers into the command
and runs the same checks again: they pass, or refuse anew, and that refusal's ways out are followed in turn. In-process
(Hydra's compose API, no run), on a pretend machine: 2 CPU cores, no GPU, 24 GB free.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path

import pytest
import torch
import ways_out
from helpers import CONF_DIR
from omegaconf import DictConfig
from ways_out import RUN_DIR, app_refusal, built_refusal, follow, refusal, tiny_checkpoint, unreached

from gptlab.atomic import atomic_write, atomic_write_text
from gptlab.config import rules, schemas
from gptlab.config.callbacks import BY_TARGET
from gptlab.config.fields import check_of, schema_fields
from gptlab.config.store import SCHEMAS
from gptlab.config.validate import NAMED_NODES, schema_of
from gptlab.model import GPTConfig
from gptlab.preflight import checkpoint_plan, guards, option_relevance

GB = 1e9
MB = 2**20
# Pretend disks for the checkpoint space check (a nano checkpoint is ~9.8 MB; the default callbacks keep 3 at once):
# one that holds last.ckpt and one being written but not a best copy besides, one that holds fewer than two.
SMALL_DISK, TINY_DISK = RUN_DIR.parent / "small-disk", RUN_DIR.parent / "tiny-disk"
DISKS = {SMALL_DISK: 25 * MB, TINY_DISK: int(15.06 * MB)}  # 15.06: the space to free is not a round number
DEPTH = 3


@pytest.fixture(autouse=True)
def two_cores_no_gpu(monkeypatch):
    """The same machine for every case, whatever runs the tests (refusals are cached per command)."""
    monkeypatch.setattr(guards, "gpu_count", lambda: 0)
    monkeypatch.setattr(guards.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(guards, "free_bytes", lambda accelerator: 24 * GB)
    for disk in DISKS:
        disk.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda directory: next(
        (free for disk, free in DISKS.items() if disk in (directory, *directory.parents)), 24 * GB))


def assert_followed(command: tuple[str, ...], refuse=refusal) -> None:
    first = refuse(command)
    assert first is not None, f"{' '.join(command)} is not refused"
    walk = follow(command, DEPTH, refuse=refuse)
    assert not walk.broken, "\n".join(walk.broken)


# ---- every field with a range check, at the place a composed config has it -------------------------------------
CHECKED = sorted({*SCHEMAS.values(), *BY_TARGET.values(), schemas.Runtime, schemas.Stages}, key=lambda s: s.__name__)
FIELDS = [(schema, name) for schema in CHECKED for name, f in schema_fields(schema).items() if check_of(f)]
APPENDED = [(schemas.Trainer, name) for name in schemas.Trainer.appended]
# What a user types that a check should refuse, tried in turn for each field: numbers out of most ranges (first, so
# that the range check's own raise is reached), a word, an empty list and string, null.
BAD = ("-7", "0", "1.5", "0.5", "bogus", "[]", "''", "null", "[1,2,3]")
# Commands whose configs hold every schema's node (group options beyond the defaults).
WHERE = [(), *[(f"{group}={p.stem}",) for group in ("tokenizer", "optimizer", "scheduler", "trainer", "logger")
               for p in sorted((CONF_DIR / group).glob("*.yaml"))]]


def nodes(cfg: DictConfig):
    """(prefix, node) of every node check() types: the top level, each group's node, each named callback/logger."""
    yield "", cfg
    for key, node in cfg.items():
        if isinstance(node, DictConfig):
            yield f"{key}.", node
            if key in NAMED_NODES:
                for name, inner in node.items():
                    if isinstance(inner, DictConfig):
                        yield f"{key}.{name}.", inner


@functools.cache
def typed_nodes() -> list[tuple[type, tuple[str, ...], str, frozenset[str]]]:
    """(schema, command, prefix, keys set) of every typed node of the WHERE commands' configs."""
    return [(schema_of(node), command, prefix, frozenset(node.keys())) for command in WHERE
            for prefix, node in nodes(ways_out._base(command, str(RUN_DIR)))]


def place(schema: type, name: str) -> tuple[tuple[str, ...], str]:
    """A command whose config has a node of `schema` (one that sets `name`, if any does), and the node's prefix."""
    found = [(command, prefix, name in keys) for typed, command, prefix, keys in typed_nodes() if typed is schema]
    for command, prefix, _sets in sorted(found, key=lambda f: not f[2]):
        return command, prefix
    raise AssertionError(f"no shipped config has a {schema.__name__} node: add a command that has one to WHERE")


def refused_values(command: tuple[str, ...], key: str, limit: int = 2) -> list[tuple[str, ...]]:
    """Up to `limit` commands that set `key` to a BAD value and are refused for it, in different words (not only
    the value they quote: a wrong type is often refused by the range check's own words)."""
    found, messages = [], set()
    for bad in BAD:
        tried = (*command, f"{key}={bad}")
        refused = refusal(tried)
        words = refused and re.sub(r"^(\S+?)=(\[[^\]]*\]|\S+) ", r"\1=<value> ", refused.message)
        if refused is not None and key.lstrip("+") in refused.message and words not in messages:
            found.append(tried)
            messages.add(words)
            if len(found) == limit:
                break
    return found


@pytest.mark.parametrize("schema,name", FIELDS + APPENDED, ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_each_checked_fields_refusals_ways_out_work(schema, name) -> None:
    command, prefix = place(schema, name)
    key = f"{'+' if (schema, name) in APPENDED else ''}{prefix}{name}"
    refused = refused_values(command, key)
    assert refused, f"no value of {BAD} is refused for {key}: add one its check refuses"
    for tried in refused:
        assert_followed(tried)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(GPTConfig)])
def test_each_model_fields_refusals_ways_out_work(name) -> None:
    refused = refused_values((), f"model.{name}")
    assert refused, f"no value of {BAD} is refused for model.{name}"
    for tried in refused:
        assert_followed(tried)


# ---- rules between fields, each by its name; and every other refusal by hand, found through its raise ----------
RULE_CASES = {
    "windows_fit_the_context": [("data.block_size=512",)],
    "mup_trains_with_adam": [("model.parametrization=mup", "optimizer=sgd")],
    "fused_step_without_loss_scaling": [("optimizer.fused=true", "trainer.precision=16-mixed")],
    "fsdp_strategy_keys": [("trainer=fsdp", "+trainer.strategy.foo=1"),
                           ("trainer=fsdp", "+trainer.strategy.sharding_strategy=FULL_SHARD"),
                           ("+trainer.strategy.reshard_after_forward=false",)],
    "monitors_name_logged_metrics": [("+callbacks.early_stop._target_=lightning.pytorch.callbacks.EarlyStopping",
                                      "+callbacks.early_stop.monitor=val/los")],
    "ckpt_path_or_resume": [("resume=auto", "ckpt_path=/nonexistent/last.ckpt")],
    "muon_needs_whole_matrices": [("optimizer=muon", "trainer=fsdp"), ("optimizer=normuon", "trainer=fsdp")],
    "whole_model_compile_without_fsdp": [("trainer=fsdp", "runtime.compile_scope=model")],
    "stages_fit_the_batch": [("stages.seq_lens=[24]",), ("stages.batch_sizes=[8,64]",)],
    "untie_on_one_device": [("model.untie_at=0.5", "trainer=fsdp"), ("model.untie_at=0.5", "trainer=ddp")],
    "seconds_without_step_plans": [("budget=seconds:60", "model.untie_at=0.5"),
                                   ("budget=seconds:60", "stages.seq_lens=[16,32]"),
                                   ("budget=seconds:60", "scheduler._target_=torch.optim.lr_scheduler.StepLR")],
}
ONLY_WHEN_CASES = {
    "model.rope_theta": ("model.rope_theta=500000.0",),
    "model.rope_fraction": ("model.rope_fraction=0.5",),
    "model.sinusoidal_scale": ("model.sinusoidal_scale=1.0",),
    "model.activation": ("model.mlp_layers=1", "model.activation=relu"),
    "model.d_ff": ("model.mlp_layers=1", "model.d_ff=256"),
    "model.attn_window": ("model.attn_window=64",),
    "model.attn_impl": ("model.attn_impl=chunked",),
    "model.mup_base_width": ("model.mup_base_width=64",),
    "model.value_embed_gate": ("model.value_embed_gate=true",),
    "model.mtp_weights_end": ("model.mtp_weights_end=[]",),
    "data.shard_tokens": ("data.store=memory", "data.shard_tokens=1000"),
    "data.verify_sha256": ("data.store=memory", "data.verify_sha256=false"),
    "data.val_windows": ("data.val_windows=8",),
    "data.sampling": ("data.store=streaming", "data.sampling=epoch"),
    "data.samples_per_epoch": ("data.sampling=epoch", "data.samples_per_epoch=100"),
    "optimizer.nesterov": ("optimizer=sgd", "optimizer.momentum=0.0"),
    "callbacks.text_samples.top_k": ("callbacks.text_samples.temperature=0", "callbacks.text_samples.top_k=10"),
    "callbacks.zero_shot.limit": ("callbacks.zero_shot.limit=100",),
    "callbacks.zero_shot.every_n_steps": ("callbacks.zero_shot.every_n_steps=100",),
    "runtime.compile_scope": ("runtime.compile_scope=blocks",),  # compile is off on this GPU-less machine
    "model.untie_at": ("model.untie_at=0.5", "model.tie_weights=false"),
    "stages.windows": ("stages.windows=[64]",),
    "stages.batch_lr_exponent": ("stages.batch_lr_exponent=1.0",),
    "runtime.float8_layers": ("runtime.float8_layers=[mlp,head]",),
}
OTHER_CASES = [
    # GPTConfig's rules between its own fields
    ("model.n_head=3",), ("model.pos_emb=rope", "model.head_dim=7", "model.v_head_dim=8"),
    ("model.pos_emb=rope", "model.rope_fraction=0.3"), ("model.pos_emb=rope", "model.rope_fraction=1.5"),
    ("model.attn_pattern=[dense,sparse]",), ("+model.n_embdd=64",), ("optimizer.betas=[0.9,1.5]",),
    ("model.attn_pattern=[]",), ("model.attn_pattern=dense",), ("model.vocab_size=100",),
    # the speedrun's keys (model/speedrun_checks.py): their own checks, then the rules between them
    ("model.no_attn_layers=[1,1]",), ("model.mtp_weights=[-1]",), ("model.zero_init_proj=[out]",),
    ("model.skips=[[2,1]]",), ("model.logit_sigmoid_cap=[23,5]",), ("model.value_embed_layers=[1,4]",),
    ("model.skips=[[1,4]]",), ("model.value_embed_layers=[1,2]", "model.no_attn_layers=[2]"),
    ("model.logit_softcap=15", "model.logit_sigmoid_cap=[23,5,7.5]"),
    ("model.mtp_weights=[0.5,0.25]", "model.mtp_weights_end=[0.0]"),
    ("model.parametrization=mup", "model.init_scale=0.5"),
    # the attention kernels, float8, the optimizer under a strategy
    ("model.attn_pattern=[dense,local]", "model.attn_window=64", "model.attn_impl=flex", "model.dropout=0.1"),
    ("model.attn_pattern=[dense,local]", "model.attn_window=64", "model.attn_impl=flex"),
    ("model.attn_pattern=[dense,strided]", "model.attn_window=64", "model.attn_impl=flash"),
    ("model.attn_pattern=[dense,local]", "model.attn_window=64", "model.attn_impl=flash"),
    ("runtime.float8=true",),
    # the speedrun's lists, refused by their own checks (other bad values are Hydra's type errors, in the same words)
    ("runtime.float8_layers=[]",), ("stages.windows=[]",),
    # the machine
    ("trainer.accelerator=gpu", "trainer.devices=8"), ("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=16"),
    ("model=gpt2_small", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"),
    # resume
    ("ckpt_path=/nonexistent/last.ckpt",),
    # the checkpoints' disk (its ways out that no command types: test_checkpoint_space_ways_out below)
    (f"hydra.run.dir={SMALL_DISK}/run",), (f"hydra.run.dir={TINY_DISK}/run",), (f"paths.log_dir={TINY_DISK}",),
    # check(): appended keys, true/false words, nodes
    ("+optimizer.lrr=0.1",), ("+optimizer.params=1",), ("model.tie_weights=no",), ("callbacks.throughput=5",),
    ("paths.log_dir=/etc/hostname/outputs",),
    # Hydra's compose errors, as gptlab.config.suggest words them
    ("model=nanoo",), ("model.n_embdd=64",), ("model.compile=true",), ("trainer.limit_train_batches=5",),
    ("logger=null",),
    ("optimizer.lrr=0.1",),
    # a node's class that does not import (gptlab.config.targets.check_target)
    ("+foo=1",), ("+model.foo=1",), ("tokenizer._target_=no.such.Class",), ("optimizer._target_=torch.optim.SGDD",),
    ("callbacks.loss_spike._target_=x.y",), ("scheduler._target_=''",),
    # a _target_ Hydra's own target policy refuses (gptlab.errors.hydra_policy_refusal words it)
    ("tokenizer._target_=os.system",),
    # the ladder's steps from its ratio (gptlab.config.ladder_steps)
    ("experiment=ladder_gpt2_to_llama", "ladder_tokens_per_param=null"),
    # a budget of a kind gptlab does not know (gptlab.config.budget)
    ("budget=hours:1",), ("budget=tokens:-5",),
]
MIXTURE = "data=mixture_example"
# Refusals the checks pass and building the run's objects raises (gptlab.apps.build.build_run: the datamodule and its
# corpus, the Trainer, the batching), followed through ways_out.built_refusal.
BUILD_CASES = [
    ("callbacks.loss_spike.min_history=50", "callbacks.loss_spike.window=10"),
    ("global_batch_tokens=1000",), ("global_batch_tokens=8192", "trainer.accumulate_grad_batches=2"),
    ("trainer.strategy=bogus",), ("trainer.strategy=deepspeed",),
    ("data.source._target_=builtins.dict",), ("data.source._target_=gptlab.data.sources.Bogus",),
    ("+callbacks.x._target_=os.system",), ("+callbacks.x._target_=subprocess.run",),
    ("+data.source.foo=1",),
    (MIXTURE, "data.store=streaming"),
    (MIXTURE, "data.source.sources.pydocs.weight=0", "data.source.sources.python_stdlib.weight=0"),
    (MIXTURE, "~data.source.sources.pydocs", "~data.source.sources.python_stdlib"),
    (MIXTURE, "~data.source.sources.pydocs.source"), (MIXTURE, "+data.source.sources.pydocs.foo=1"),
    (MIXTURE, "data.source.sources.pydocs.source=5"), (MIXTURE, "data.source.sources.pydocs.weight=-1"),
    (MIXTURE, "+data.source.sources.pydocs.tokenizer={_target_:gptlab.data.tokenizers.BiteTokenizer}"),
]
# Raises no command on this test machine reaches, each with the reason.
UNREACHED = {
    ("model/sparse_attention.py", "torch.nn.attention.flex_attention"): "a torch without FlexAttention",
    ("model/sparse_attention.py", "flash-attn package"): "a CUDA GPU without flash-attn",
    ("model/sparse_attention.py", "cannot compute attention with"): "flash-attn installed (refused first without it)",
    ("execution/float8.py", "has compute capability"): "a CUDA GPU older than 8.9",
    ("execution/float8.py", "pip install torchao"): "an H100 without torchao",
    ("execution/float8.py", "in float8, but no such"): "an H100 with torchao (apply_float8 runs as training starts)",
    ("preflight/guards.py", "this machine has {found}"): "a machine with fewer GPUs than asked (test_suggestions.py)",
    ("execution/strategies.py", "raise ConfigError(problem)"): "building trainer=fsdp's strategy (rules refuse first)",
    ("model/config.py", "model.vocab_size is null"): "GPTConfig.padded_vocab_size, after the tokenizer filled it in",
    # Hydra's typed nodes refuse these values first, in the same words (gptlab.config.suggest.own_check_message)
    ("model/config.py", "model.qk_norm={self.qk_norm!r} must be true or false"): "Hydra's bool type, same words",
    ("model/config.py", "must be a list of kinds cycled"): "Hydra's list type, in the same words",
    ("runs/resume.py", "invalid_choice(\"resume\""): "the schema's choice check of `resume`",
    ("model/config.py", "unknown model field(s)"): "a checkpoint's config (check_model names a typed key first)",
    ("runs/resume.py", "already holds a run"): "a run dir with checkpoints: test_run_dir_ways_out below",
    ("runs/resume.py", "_unreadable_message"): "a run dir with checkpoints: test_run_dir_ways_out below",
    ("data/mixture.py", "a Mixture is read source by source"): "a Mixture read as one corpus (MixtureStore refuses)",
    ("data/mixture.py", "but the run tokenizes with"): "a source's tokenizer other than bytes: GPT-2's ranks, offline",
    ("eval/sampling.py", "no tokenizer for ckpt_path"): "a checkpoint that records no tokenizer (one from before)",
    ("eval/sampling.py", "produced id"): "a checkpoint whose vocab is smaller than its own tokenizer's",
    ("eval/zeroshot.py", "has no examples"): "an empty task file (test_zeroshot.py)",
    ("preflight/devices.py", "CUDA GPU(s) (cuda:0 to"): "a machine with CUDA GPUs",
    ("preflight/output_dirs.py", "cannot write to output dir"): "a dir that passes fields.writable_dir (which makes "
                                                                  "a file there) and then cannot be written",
    ("config/validate.py", "package, which is not installed"): "logger=wandb or mlflow without the package "
                                                                "(installed here; test_loggers.py hides it)",
    ("model/generation.py", "must be >= "): "sample.py's table check (eval/sampling.SAMPLE) refuses first",
    ("model/generation.py", "must be in (0, 1]"): "sample.py's table check (eval/sampling.SAMPLE) refuses first",
    ("data/mixture_store.py", "the checkpoint"): "resuming a checkpoint of another corpus (test_mixture.py)",
    ("config/validate.py", "failed: {err!r}"): "a module that exists but fails to import (none of gptlab's own)",
    ("model/gpt.py", "model.vocab_size is null"): "a GPT from Python without a vocab (train's tokenizer fills it)",
    ("train/optim.py", "ConfigError(refusal)"): "the config rule of muP's optimizer refuses first, in the same words",
    ("train/optim.py", "needs trainer.max_steps >= 1"): "trainer.max_steps's range refuses first (a Python schedule)",
    ("train/muon.py", "needs the parameter groups"): "a MuonAdamW built from Python with other parameter groups",
    ("train/muon.py", "found no 2-D hidden weight"): "a model with no hidden matrix (every GPT has some)",
    # length extrapolation (tests/test_length_extrapolation.py reaches each with a trained sweep or a long model)
    ("apps/evaluate.py", "is a sweep dir: eval.py scores its jobs"): "a sweep dir as ckpt_path without contexts",
    ("apps/context_eval.py", "longer than the validation split"): "a position scheme without a table (CKPT's is)",
    ("apps/context_eval.py", "holds no common multiple"): "contexts whose common multiple exceeds the split",
    ("apps/context_eval.py", "without a job that could be scored"): "a sweep dir none of whose jobs finished",
    ("eval/extrapolation.py", "ConfigError(refusal)"): "eval.py's check_scorable refuses the same contexts first",
    ("report/context_report.py", "cannot be read"): "ablation_report.py --context on a damaged context_eval.json",
    ("report/context_report.py", "give a context length in tokens"): "ablation_report.py --context 0",
    ("report/context_report.py", "has a loss at context"): "ablation_report.py --context on an unscored sweep",
    ("report/context_report.py", "has no loss at context"): "ablation_report.py --context on a baseline unscored",
    ("train/joint_optimizer.py", "is not optimizer="): "another optimizer's state (muon's, normuon's): "
                                                       "check_resumable refuses first (test_ways_out_files)",
    ("train/normuon.py", "needs the parameter groups"): "a NorMuonAdam built from Python with other parameter groups",
}


def cases() -> list[tuple[str, ...]]:
    return [c for listed in RULE_CASES.values() for c in listed] + list(ONLY_WHEN_CASES.values()) + OTHER_CASES


@pytest.mark.parametrize("command", cases(), ids=" ".join)
def test_each_refusals_ways_out_work(command) -> None:
    assert_followed(command)


@pytest.mark.parametrize("command", BUILD_CASES, ids=" ".join)
def test_each_build_refusals_ways_out_work(command) -> None:
    assert refusal(command) is None, "the checks refuse it: a case for test_each_refusals_ways_out_work"
    assert_followed(command, built_refusal)


def test_every_rule_has_a_case_that_it_refuses() -> None:
    assert set(RULE_CASES) == {rule.__name__ for rule in rules.RULES}, "a rule of config/rules.py needs a case"
    for rule in rules.RULES:
        for command in RULE_CASES[rule.__name__]:
            message = rule(ways_out.compose(command))
            assert message and refusal(command).message == message, (rule.__name__, command)


def test_every_refused_option_relevance_row_has_a_case() -> None:
    refused_rows = {row.option for row in option_relevance.RULES if not row.warn}
    assert set(ONLY_WHEN_CASES) == refused_rows
    for option, command in ONLY_WHEN_CASES.items():
        assert refusal(command).message.startswith(f"{option}="), (option, refusal(command).message)


def test_every_raise_of_the_checks_is_reached_by_a_case() -> None:
    """A refusal added to a check module without a case here (or in UNREACHED, with why) fails this test."""
    reached = {built_refusal(command).site for command in BUILD_CASES}
    tiny_checkpoint(), damaged_checkpoint(), long_target()
    reached |= {refusal(command).site for command in PLACE_CASES}
    reached |= {app_refusal(app, command).site for app, listed in APP_CASES.items() for command in listed}
    for command in cases():
        reached.add(refusal(command).site)
    for schema, name in FIELDS + APPENDED:
        command, prefix = place(schema, name)
        key = f"{'+' if (schema, name) in APPENDED else ''}{prefix}{name}"
        reached |= {refusal(c).site for c in refused_values(command, key)}
    for f in dataclasses.fields(GPTConfig):
        reached |= {refusal(c).site for c in refused_values((), f"model.{f.name}")}
    missing = unreached(reached, UNREACHED, ways_out.AREAS[Path(__file__).name])
    assert not missing, "raises no case reaches:\n" + "\n".join(missing)


def test_every_module_that_raises_a_user_error_is_in_an_area() -> None:
    """Each module of gptlab that raises a user error is followed by one test file (ways_out.AREAS), which exists."""
    listed = [m for modules in ways_out.AREAS.values() for m in modules]
    assert len(listed) == len(set(listed)), "a module in two areas"
    raising = {str(Path(path).relative_to(ways_out.SRC)) for (path, _) in
               ways_out.raise_sites([str(p.relative_to(ways_out.SRC)) for p in ways_out.SRC.rglob("*.py")])}
    assert raising <= set(listed), f"modules no ways-out test follows: {sorted(raising - set(listed))}"
    for name in ways_out.AREAS:
        assert (Path(__file__).parent / name).is_file(), name


def test_run_dir_ways_out(tmp_path: Path) -> None:
    """A new run into a dir that holds a checkpoint: each way out (resume=auto, which refuses anew since it does not
    load, and whose resume=restart then passes; resume=restart; leaving hydra.run.dir out) is followed."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    assert_followed((f"hydra.run.dir={run_dir}",))


# Ways out that ask for a place (`hydra.run.dir=<dir>`), typed as a user would: a writable one.
PLACES = {"hydra.run.dir": str(RUN_DIR.parent / "writable" / "run"), "paths.log_dir": str(RUN_DIR.parent / "writable"),
          "paths.output_dir": str(RUN_DIR.parent / "writable" / "run")}
PLACE_CASES = [("hydra.run.dir=/proc/gptlab-run",), ("paths.log_dir=/proc/gptlab",)]


@pytest.mark.parametrize("command", PLACE_CASES, ids=" ".join)
def test_unwritable_output_dir_ways_out(command) -> None:
    """A run dir nothing can be written to (/proc here) is refused for that, not for its filesystem's free space (0),
    and a writable place it asks for passes."""
    said = refusal(command).message  # composed here: the CLI refuses hydra.run.dir itself first (CheckOutputDir)
    assert said.startswith(("paths.output_dir=", "paths.log_dir=")) and "/proc is not writable" in said, said
    walk = follow(command, DEPTH, stand_ins=PLACES)
    assert walk.followed and not walk.broken, walk.broken


LONG_TARGET = RUN_DIR.parent / "lambada_long_target.jsonl"  # a word longer than the tiny model's context (32)


def long_target() -> Path:
    """LONG_TARGET, and SHORT_HELLASWAG: the HellaSwag fixture's rows with endings cut to fit (a way out's file)."""
    atomic_write_text(LONG_TARGET, json.dumps({"text": "The word is " + "x" * 40}) + "\n")  # another process reads
    rows = [json.loads(line) for line in (FIXTURES / "hellaswag.jsonl").read_text().splitlines() if line.strip()]
    atomic_write_text(SHORT_HELLASWAG, "".join(json.dumps({**row, "endings": [e[:20] for e in row["endings"]]}) + "\n"
                                               for row in rows))
    return LONG_TARGET


DAMAGED = RUN_DIR.parent / "damaged" / "last.ckpt"


def damaged_checkpoint() -> Path:
    """tiny_checkpoint() without one of its weights: a checkpoint whose state is not the model it records."""
    if not DAMAGED.is_file():
        ckpt = torch.load(tiny_checkpoint(), weights_only=False)
        ckpt["state_dict"].pop(sorted(ckpt["state_dict"])[0])
        DAMAGED.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(DAMAGED, lambda tmp: torch.save(ckpt, tmp))
    return DAMAGED


SIZE = re.compile(r"free ([\d,.]+) (KB|MB|GiB) on that disk")
UNIT = {"KB": 2**10, "MB": 2**20, "GiB": 2**30}


@pytest.mark.parametrize("command", [(f"hydra.run.dir={SMALL_DISK}/run",), (f"hydra.run.dir={TINY_DISK}/run",),
                                     (f"paths.log_dir={TINY_DISK}",)], ids=" ".join)
def test_checkpoint_space_ways_out(command, monkeypatch) -> None:
    """The ways out of the checkpoint space refusal that no command types, followed as a user would: freeing the
    space it names on that disk, or giving a run dir (paths.log_dir when the run dir is under it) on a larger one.
    Its typed ways (save_top_k=0, the callbacks set to null) are followed by test_each_refusals_ways_out_work."""
    message = refusal(command).message
    assert message.startswith("checkpoint dir "), message
    key = "paths.log_dir" if "point paths.log_dir at a larger disk" in message else "hydra.run.dir"
    assert key in message
    larger = RUN_DIR.parent / "larger-disk"
    moved = ways_out.typed_in(command, key, str(larger / "run") if key == "hydra.run.dir" else str(larger))
    assert refusal(moved) is None, (moved, refusal(moved))
    freed = SIZE.search(message)
    assert freed, message
    disk = next(d for d in DISKS if str(d) in command[0])
    more = DISKS[disk] + int(float(freed.group(1).replace(",", "")) * UNIT[freed.group(2)])
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda directory: more)
    assert refusal.__wrapped__(command) is None, f"freeing what {message!r} names is not enough"


# ---- eval.py's and sample.py's own refusals, on a tiny checkpoint (ways_out.app_refusal) -------------------------
FIXTURES = Path(__file__).parent / "fixtures" / "zeroshot"
CKPT = f"ckpt_path={ways_out.CKPT}"
# What the words ask for by a placeholder (`ckpt_path=<...>`), typed as a user would: a file that is one.
SHORT_HELLASWAG = RUN_DIR.parent / "hellaswag_short.jsonl"  # endings that fit the tiny model's context (32)
STAND_INS = {"ckpt_path": str(ways_out.CKPT), "task_data.lambada": str(FIXTURES / "lambada.jsonl"),
             "task_data.hellaswag": str(SHORT_HELLASWAG)}
APP_CASES = {
    "sample": [(), ("ckpt_path=/nonexistent.ckpt",), ("ckpt_path=/etc/hostname",), (CKPT, "temperature=-1"),
               (CKPT, "top_k=0"), (CKPT, "top_p=2"), (CKPT, "num_beams=0"), (CKPT, "temperature=0", "top_k=5"),
               (CKPT, "num_beams=2", "top_k=5"), (CKPT, "device=cuda"), (CKPT, "device=tpu"),
               (CKPT, "tokenizer=gpt2"), (CKPT, "prompt=hi", "prompt_file=/etc/hostname"),
               (CKPT, "prompt_file=/nonexistent"), (CKPT, f"prompt_file={ways_out.CKPT}"), (CKPT, "prompt="),
               (CKPT, "num_samples=0"), (CKPT, "device=mps"), (CKPT, "device=meta"), (CKPT, "+foo=1"),
               (CKPT, "+top_kk=5")],
    "eval": [(), ("ckpt_path=/nonexistent.ckpt",), (CKPT, "val_loss=false"), (CKPT, "tasks=[bogus]"),
             (CKPT, "task_limit=5"), (CKPT, "trainer.limit_val_batches=0"), (CKPT, "task_batch_size=0"),
             (CKPT, "tasks=[lambada]", "task_limit=0"), (CKPT, "val_loss=maybe"), (CKPT, "data.block_size=64"),
             (CKPT, "tokenizer=gpt2"), (CKPT, "trainer.devices=4"), (f"ckpt_path={DAMAGED}",), (CKPT, "+val_los=1"),
             (CKPT, "tasks=[lambada]", f"task_data.lambada={LONG_TARGET}"), (CKPT, "contexts=5"),
             (CKPT, "contexts=[0]"), (CKPT, "contexts=[16,16]"), (CKPT, "contexts=[64]"),
             (CKPT, "val_loss=false", "contexts=[16]", "context_targets=1"),
             (CKPT, "val_loss=false", "contexts=[16]", "data.store=streaming")],
}


@pytest.mark.parametrize("app,command", [(app, c) for app, listed in APP_CASES.items() for c in listed],
                         ids=lambda x: x if isinstance(x, str) else " ".join(x).replace(CKPT, "ckpt_path=<tiny>"))
def test_each_eval_and_sample_refusals_ways_out_work(app, command) -> None:
    tiny_checkpoint(), damaged_checkpoint(), long_target()
    refuse = functools.partial(app_refusal, app)
    assert refuse(command) is not None, f"{app} {' '.join(command)} is not refused"
    walk = follow(command, DEPTH + 1, refuse=refuse, stand_ins=STAND_INS)  # + 1: each task needs its data
    assert not walk.broken, "\n".join(walk.broken)
