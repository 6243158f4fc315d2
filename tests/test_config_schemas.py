"""Typed configs (gptlab.config), as a new user meets them: a misspelt key, a key appended with `+`, a wrong type
or two groups that disagree each stop `python src/train.py` with one `gptlab: error:` line that names the key and
the one meant, exit 2, no traceback and no run dir; the schemas document every field once, and the YAML values and
comments, the constructors' defaults and the reference page agree with them; the runtime flags left the
architecture and old checkpoints still load."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import CONF_DIR, ROOT, TINY, compose_config, run_train
from omegaconf import OmegaConf

import gptlab.config.callbacks as cb
import gptlab.config.copies as copies
import gptlab.config.schemas as s
from gptlab.checkpoint.reader import load_model
from gptlab.config.fields import check_of, help_of, schema_fields, setting
from gptlab.config.reference import GROUP_FIELDS, page
from gptlab.config.suggest import compose_message
from gptlab.config.validate import check
from gptlab.errors import ConfigError
from gptlab.model import GPT, GPTConfig

# (arguments of src/train.py, what its one line must say): one of each way a config is refused (a key Hydra does not
# know, a `+` key a constructor does not take, a cross-field rule, a missing group option), run as a user runs them.
REFUSED = [
    (["model.n_layers=2"], ["model.n_layers is not a key of model.", "Did you mean model.n_layer?"]),
    (["+optimizer.foo=1"], ["optimizer.foo is not an argument of gptlab.train.optim.adamw.", "lr"]),
    (["data.block_size=512", "model.block_size=256"], ["data.block_size=512 is longer than model.block_size (256)"]),
    (["model=nanoo"], ["conf/model/ has no option nanoo.", "Did you mean model=nano?"]),
]
# The same ways, more examples, through the same two steps in-process (compose, then check); the entry script's
# part (one line, exit 2, no run dir) is the same for all and shown above: a fresh interpreter costs ~8 s of imports.
REFUSED_IN_PROCESS = [
    (["trainer.max_step=3"], ["trainer.max_step is not a key of trainer.", "Did you mean trainer.max_steps?"]),
    (["+trainer.max_step=3"], ["trainer.max_step is not an argument of lightning.pytorch.Trainer.",
                               "Did you mean trainer.max_steps?"]),
    (["trainer.max_steps=abc"], ["trainer.max_steps='abc' is invalid: use an integer >= 1."]),
    (["model.tie_weights=maybe"], ["model.tie_weights='maybe' is invalid: use true or false."]),
    (["model.compile=true"], ["model.compile is now runtime.compile"]),
]
# Neighbours, through the same two steps in-process (compose, then check): a fresh interpreter costs ~8 s of imports.
NEIGHBOURS = [
    ("callbacks.text_samples.tempreature=0.5", "Did you mean callbacks.text_samples.temperature?"),
    ("+callbacks.text_samples.tempreature=0.5", "Did you mean callbacks.text_samples.temperature?"),
    ("+data.batchsize=4", "not an argument of gptlab.data.GPTDataModule. Did you mean data.batch_size? Type it "
                          "without +."),
    ("data.batchsize=4", "data.batchsize is not a key of data. Did you mean data.batch_size?"),
    ("seeed=1", "seeed is not a key of the top level of the config. Did you mean seed?"),
    ("+seeed=1", "seeed is not a key of the top level of the config. Did you mean seed?"),
    ("optimizer=adamww", "conf/optimizer/ has no option adamww. Did you mean optimizer=adamw?"),
    ("+optimizer.epss=1e-6", "Did you mean optimizer.eps?"),
    ("+scheduler.warmup=3", "Did you mean scheduler.warmup_steps?"),
    ("paths.logdir=x", "Did you mean paths.log_dir?"),
    ("runtime.compil=true", "Did you mean runtime.compile?"),
    ("model.n_layer=2.5", "model.n_layer=2.5 must be a positive integer."),  # GPTConfig's own words
    ("model.dropout=high", "model.dropout='high' must be a number in [0, 1)."),
    ("model.attn_pattern=dense", "model.attn_pattern='dense' must be a list of kinds cycled over layers"),
    ("optimizer.betas=fast", "optimizer.betas='fast' is invalid: use two numbers in [0, 1), e.g. [0.9, 0.95]."),
    ("trainer.max_steps=-1", "trainer.max_steps=-1 is invalid: use an integer >= 1."),
    ("data.batch_size=8.5", "data.batch_size=8.5 is invalid: use an integer >= 1."),
    ("+model.activation_checkpointing=true", "model.activation_checkpointing is now runtime.activation_checkpointing"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> list[tuple[Path, subprocess.CompletedProcess]]:
    """Every REFUSED command, run as `python src/train.py` (forked from the test zygote: the entry script's whole
    path from argv to exit, without a fresh interpreter's imports)."""
    done = []
    for i, (args, _) in enumerate(REFUSED):
        log_dir = tmp_path_factory.mktemp(f"refused{i}") / "outputs"
        done.append((log_dir, run_train([*TINY, *args, f"paths.log_dir={log_dir}"], cwd=log_dir.parent)))
    return done


@pytest.mark.parametrize("index", range(len(REFUSED)), ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_in_one_line_naming_the_key_meant(refusals, index: int) -> None:
    log_dir, proc = refusals[index]
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("gptlab: error: "), proc.stderr
    for words in REFUSED[index][1]:
        assert words in lines[0], lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (log_dir / "runs").exists(), "a refused config left a run dir"


def refusal(*overrides: str) -> str:
    """The message a TINY config with `overrides` is refused with, at compose or by check."""
    try:
        cfg = compose_config([*TINY, *overrides], "/tmp/unused")
    except Exception as err:
        message = compose_message(err)
        assert message is not None, err
        return message
    with pytest.raises(ConfigError) as err:
        check(cfg, list(overrides))
    return str(err.value)


@pytest.mark.parametrize("args,words", REFUSED_IN_PROCESS, ids=[" ".join(a) for a, _ in REFUSED_IN_PROCESS])
def test_refused_naming_the_key_meant(args: list[str], words: list[str]) -> None:
    message = refusal(*args)
    assert all(w in message for w in words), message


@pytest.mark.parametrize("override,words", NEIGHBOURS, ids=[o for o, _ in NEIGHBOURS])
def test_neighbours_are_refused_naming_the_key_meant(override: str, words: str) -> None:
    assert words in refusal(override)


@pytest.mark.parametrize("override", ["model.tie_weights=no", "model.tie_weights=1", "check_memory=off",
                                      "data.verify_sha256=yes", "runtime.compile=0"])
def test_true_false_fields_take_only_true_or_false(override: str) -> None:
    key, _, value = override.partition("=")
    assert refusal(override).startswith(f"{key}=") and "use true or false" in refusal(override)


def test_appended_trainer_argument_is_taken_and_range_checked() -> None:
    check(compose_config([*TINY, "+trainer.limit_train_batches=2"], "/tmp/unused"), [])
    assert "trainer.limit_train_batches=0 is invalid" in refusal("+trainer.limit_train_batches=0")
    assert "add it with +trainer.limit_train_batches" in refusal("trainer.limit_train_batches=2")
    assert "passed by gptlab itself" in refusal("+trainer.callbacks=[]")


def test_renamed_runtime_flags_name_the_new_key() -> None:
    for old in ("compile", "activation_checkpointing"):
        for override in (f"model.{old}=true", f"+model.{old}=true"):
            assert f"model.{old} is now runtime.{old}" in refusal(override)
    cfg = compose_config(["experiment=gpt3_small_fineweb"], "/tmp/unused")  # a recipe that compiles, moved over
    assert cfg.runtime.compile is True and "compile" not in cfg.model


def test_checkpoint_from_before_the_move_loads(tmp_path) -> None:
    """main's checkpoints stored compile and activation_checkpointing in hyper_parameters['model']."""
    config = GPTConfig(vocab_size=61, block_size=16, n_layer=1, n_head=2, n_embd=32)
    model = GPT(config)
    hparams = {**config.to_dict(), "compile": True, "activation_checkpointing": True}
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "hyper_parameters": {"model": hparams}}, path)
    loaded, _ = load_model(path)
    assert loaded.config == config
    x = torch.randint(0, 61, (2, 16))
    torch.testing.assert_close(loaded.eval()(x), model.eval()(x))


# ---- one home per field's documentation --------------------------------------------------------------------
SCHEMAS = [GPTConfig, s.Train, s.Runtime, s.Stages, s.Paths, s.ByteTokenizer, s.TiktokenTokenizer, s.Data, s.AdamW,
           s.SGD, s.Adafactor, s.Muon, s.NorMuon, s.Cosine, s.WarmupStableDecay, s.Constant, s.Trainer,
           *cb.BY_TARGET.values()]
FREE_FORM = {(s.Data, "source"), (s.Trainer, "strategy"), (s.Train, "runtime"), (s.Train, "stages"),
             (cb.ZeroShotEval, "data"), (cb.TensorBoardLogger, "version")}  # nodes or values their constructor checks


def test_every_field_is_documented_and_range_checked() -> None:
    for schema in SCHEMAS:
        for name, f in schema_fields(schema).items():
            if name in ("_target_", "_partial_") or (schema is s.Train and f.type == "Any"):
                continue
            assert help_of(f), f"{schema.__name__}.{name} has no help"
            if (schema, name) not in FREE_FORM:  # GPTConfig declares its checks like every schema
                assert check_of(f) is not None, f"{schema.__name__}.{name} has no range check"


def test_every_copy_of_an_option_equals_its_schema() -> None:
    """The schema is an option's one source: each value a base YAML file or a callback node writes, each of its
    trailing comments, and each default of the gptlab function a node builds, equals the schema's."""
    assert copies.disagreements(CONF_DIR) == []
    compared = sum(key in schema_fields(schema) for name, schema in copies.BASE_FILES.items()
                   for key in copies.yaml_comments((CONF_DIR / name).read_text()))
    assert compared >= 80
    assert set(copies.yaml_comments((CONF_DIR / "model" / "base.yaml").read_text())) == {
        f.name for f in dataclasses.fields(GPTConfig)}, "conf/model/base.yaml lists every GPTConfig field"


@dataclasses.dataclass
class Example:
    _target_: str = "tests.nowhere"
    steps: int = setting(20, "optimizer steps")
    seed: int = setting("${seed}", "the RNG")
    names: list[str] = setting(["a"], "names")


def example(steps: int = 20, seed: int = 0, names: tuple[str, ...] = ("a",)) -> None:
    """A constructor whose defaults agree with Example (seed is config wiring, so its Python default is free)."""


def test_the_copy_checker_finds_each_kind_of_disagreement() -> None:
    """Each kind of copy, made to disagree on purpose, is reported; agreeing copies are not."""
    text = "steps: 20      # optimizer steps\nseed: ${seed}  # the RNG\nnames: [a]\n"
    agreeing = OmegaConf.create(text)
    assert not [*copies.yaml_disagreements("x.yaml", agreeing, Example, copies.yaml_comments(text))]
    assert not [*copies.signature_disagreements("example", example, Example)]
    drifted_yaml = OmegaConf.create({"steps": 30, "seed": 0, "names": ["a", "b"]})
    found = [*copies.yaml_disagreements("x.yaml", drifted_yaml, Example, {"steps": "optimizer steps between saves"})]
    assert found == ["conf/x.yaml: steps: 30 but Example.steps defaults to 20",
                     "conf/x.yaml: steps's comment differs from Example.steps's help",
                     "conf/x.yaml: seed: 0 but Example.seed defaults to '${seed}'",
                     "conf/x.yaml: names: ['a', 'b'] but Example.names defaults to ['a']"]
    assert [*copies.yaml_disagreements("x.yaml", OmegaConf.create({"steps": True}), Example)]  # true is not 1

    def drifted(steps: int = 100, names: tuple[str, ...] = ("a", "b")) -> None: ...
    assert [*copies.signature_disagreements("drifted", drifted, Example)] == [
        "drifted(steps=100) but Example.steps defaults to 20",
        "drifted(names=('a', 'b')) but Example.names defaults to ['a']"]

    def forwarding(steps: int = 20, **kwargs: object) -> None: ...  # a key left out gets whatever kwargs' callee says
    assert [*copies.unwritten_keys("x.yaml", OmegaConf.create({"seed": 1}), Example, "forwarding", forwarding)] == [
        "conf/x.yaml: leaves out names, which forwarding(**kwargs) would pass on with its own default"]


def test_reference_page_is_generated_from_the_schemas() -> None:
    committed = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    assert committed == page(), "docs/reference/configuration.md is stale: run python scripts/gen_config_docs.py"
    for schema in SCHEMAS:
        for name in schema_fields(schema):
            if not name.startswith("_") and not (schema is s.Train and name in GROUP_FIELDS):
                assert f"| `{name}` |" in committed, name


def test_runtime_flags_reach_the_model_and_module(tmp_path) -> None:
    """runtime.* is wired to the GPT and its LightningModule, and never enters the model config checkpoints keep."""
    from gptlab.apps.build import build_run
    from gptlab.execution.parallelize import parallelize
    from gptlab.preflight.early_checks import check_before_run

    cfg = compose_config([*TINY, "runtime.activation_checkpointing=true", "runtime.compile=true"], tmp_path)
    run = build_run(cfg, check_before_run(cfg), None)
    model, module = run.model, run.module
    assert module.runtime.compile is True and module.runtime.checkpointing(sharded=False) == "full"
    assert not {"compile", "activation_checkpointing"} & set(module.hparams["model"])
    assert not vars(model).get("activation_checkpointing")  # the model keeps no runtime flag
    loss_fn = parallelize(model, module.runtime, torch.device("cpu"))  # what configure_model does
    assert hasattr(loss_fn, "_torchdynamo_orig_callable")  # torch.compile's wrapper (compiles at the first call)
    assert all("forward" in vars(block) for block in model.blocks)  # each block's forward checkpointed in place
    plain_cfg = compose_config(TINY, tmp_path / "plain")
    plain = build_run(plain_cfg, check_before_run(plain_cfg), None)
    assert plain.module.runtime.compile is False and plain.module.runtime.checkpointing(sharded=False) == "none"


def test_a_schedule_is_refused_alike_from_the_config_and_from_python() -> None:
    """One range per schedule argument (its schema's): decay_fraction=0 was accepted by the schema and refused only
    when the schedule was built."""
    from gptlab.train.optim import warmup_stable_decay

    cfg = compose_config([*TINY, "scheduler=wsd", "scheduler.decay_fraction=0.0"], "/tmp/unused")
    with pytest.raises(ConfigError) as composed:
        check(cfg, ["scheduler.decay_fraction=0.0"])
    with pytest.raises(ConfigError) as built:
        warmup_stable_decay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 10,
                            warmup_steps=0, decay_fraction=0.0, min_lr_ratio=0.0)
    assert str(composed.value) == str(built.value) == "scheduler.decay_fraction=0.0 is invalid: use a number in (0, 1]."
