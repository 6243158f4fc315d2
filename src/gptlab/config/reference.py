"""The configuration reference page (docs/reference/configuration.md), generated from the schemas so that the
page cannot drift from the code: `python scripts/gen_config_docs.py` writes it and a test compares."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterator

import gptlab.config.callbacks as cb
import gptlab.config.schemas as s
from gptlab.config.copies import default_of
from gptlab.config.fields import help_of
from gptlab.config.suggest import describe
from gptlab.model import GPTConfig

# (heading, what selects it, schema), in the order of conf/train.yaml's defaults.
SECTIONS: tuple[tuple[str, str, type], ...] = (
    ("Top level", "conf/train.yaml", s.Train),
    ("runtime", "conf/train.yaml `runtime:`", s.Runtime),
    ("stages", "conf/train.yaml `stages:`", s.Stages),
    ("model", "model=<preset>, conf/model/base.yaml", GPTConfig),
    ("tokenizer: bytes", "tokenizer=bytes", s.ByteTokenizer),
    ("tokenizer: tiktoken", "tokenizer=gpt2 | r50k_base | cl100k_base", s.TiktokenTokenizer),
    ("data", "data=<corpus>, conf/data/base.yaml", s.Data),
    ("optimizer: adamw", "optimizer=adamw", s.AdamW),
    ("optimizer: sgd", "optimizer=sgd", s.SGD),
    ("optimizer: adafactor", "optimizer=adafactor", s.Adafactor),
    ("optimizer: muon", "optimizer=muon", s.Muon),
    ("optimizer: normuon", "optimizer=normuon", s.NorMuon),
    ("scheduler: cosine", "scheduler=cosine", s.Cosine),
    ("scheduler: wsd", "scheduler=wsd", s.WarmupStableDecay),
    ("scheduler: constant", "scheduler=constant", s.Constant),
    ("trainer", "trainer=default | cpu | gpu | ddp | fsdp (lightning.pytorch.Trainer)", s.Trainer),
    ("callbacks.model_checkpoint, callbacks.periodic_checkpoint", "conf/callbacks/default.yaml", cb.ModelCheckpoint),
    ("callbacks.preemption_checkpoint", "conf/callbacks/default.yaml", cb.PreemptionCheckpoint),
    ("callbacks.throughput", "conf/callbacks/default.yaml", cb.TokenThroughput),
    ("callbacks.text_samples", "conf/callbacks/default.yaml", cb.TextSamples),
    ("callbacks.progress_bar", "conf/callbacks/default.yaml", cb.StepProgressBar),
    ("callbacks.stability_probes", "conf/callbacks/default.yaml", cb.StabilityProbes),
    ("callbacks.loss_spike", "conf/callbacks/default.yaml", cb.LossSpikeGuard),
    ("callbacks.zero_shot", "conf/callbacks/default.yaml", cb.ZeroShotEval),
    ("logger.tensorboard", "conf/logger/tensorboard.yaml", cb.TensorBoardLogger),
    ("logger.csv", "logger=csv, conf/logger/csv.yaml", cb.CSVLogger),
    ("logger.wandb", "logger=wandb, conf/logger/wandb.yaml", cb.WandbLogger),
    ("logger.mlflow", "logger=mlflow, conf/logger/mlflow.yaml", cb.MLFlowLogger),
    ("paths", "conf/paths/default.yaml", s.Paths),
)
HIDDEN = {"_target_", "_partial_"}
GROUP_FIELDS = {"model", "tokenizer", "data", "optimizer", "scheduler", "trainer", "callbacks", "logger", "paths",
                "runtime", "stages"}

HEADER = """# Configuration reference

Every key a config group sets, with its type, default and meaning. Generated from the schemas in
`src/gptlab/config/` and `gptlab.model.GPTConfig` by `python scripts/gen_config_docs.py`: edit the schema,
not this page. Hydra refuses a key that is not listed here or a value of the wrong type when it composes the
config; `python src/train.py --cfg job` prints the composed config.
"""


def shown_default(f: dataclasses.Field) -> Any:
    value = default_of(f)
    return "" if dataclasses.is_dataclass(value) else value


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "???":
        return "required"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return repr(value) if isinstance(value, str) and value.strip() != value or value == "" else str(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows(schema: type) -> Iterator[str]:
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name in HIDDEN or (schema is s.Train and f.name in GROUP_FIELDS):
            continue
        default = yaml_value(shown_default(f))
        yield (f"| `{f.name}` | {cell(describe(hints[f.name]))} | {cell(f'`{default}`' if default else '')} "
               f"| {cell(help_of(f))} |")


def page() -> str:
    parts = [HEADER]
    for heading, selected_by, schema in SECTIONS:
        target = getattr(schema, "_target_", None)
        parts.append(f"\n## {heading}\n\nSelected by: {selected_by}." + (f" Target: `{target}`." if target else ""))
        if schema.__doc__ and not schema.__doc__.startswith(schema.__name__ + "("):
            parts.append("\n" + " ".join(schema.__doc__.split()))
        parts.append("\n| key | type | default | meaning |\n| --- | --- | --- | --- |")
        parts.extend(rows(schema))
    return "\n".join(parts) + "\n"
