"""Where an option's default is written besides its schema, and whether each of those copies still equals it.

The schema field (`setting(default, help, check)`) is the one source of an option's type, default, range and
help. The copies that remain are each held to it here (tests/test_config_schemas.py runs `disagreements()`):
- a value written in a YAML file that lists a schema's defaults (BASE_FILES, and the callback and logger nodes
  of NODE_FILES; a preset or an experiment changes values on purpose and is not listed), and its trailing comment,
  which must be the field's help;
- a default in the signature of the gptlab function the node builds (its `_target_`, or CONSUMERS), kept for
  Python callers and for callback nodes, which are not typed, so a key their YAML leaves out gets it;
- a value an untyped config restates under another name (RESTATED: eval.yaml's task_data).
An interpolation (`${seed}`) is config wiring: the YAML must write the same text as the schema. A schema default
that is an interpolation or required (`???`) has no value a constructor could copy, so a constructor's default for
it is not compared (the config always passes it). Library constructors (torch, Lightning) keep their own
defaults: a typed node passes every field, and a callback's schema that documents a library class (ModelCheckpoint)
is compared with that class's signature.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, OmegaConf

import gptlab.config.callbacks as cb
import gptlab.config.schemas as s
from gptlab.config.fields import help_of, schema_fields
from gptlab.model import GPTConfig

REQUIRED = "???"
# conf/ file -> the schema whose defaults it lists (its top-level keys).
BASE_FILES: dict[str, type] = {
    "model/base.yaml": GPTConfig, "train.yaml": s.Train, "data/base.yaml": s.Data,
    "trainer/default.yaml": s.Trainer, "paths/default.yaml": s.Paths, "optimizer/adamw.yaml": s.AdamW,
    "optimizer/sgd.yaml": s.SGD, "optimizer/adafactor.yaml": s.Adafactor, "optimizer/muon.yaml": s.Muon,
    "optimizer/normuon.yaml": s.NorMuon,
    "scheduler/cosine.yaml": s.Cosine, "scheduler/wsd.yaml": s.WarmupStableDecay, "scheduler/constant.yaml": s.Constant,
}
# conf/ files of named constructor nodes (not typed): each node is compared with the schema of its `_target_`.
NODE_FILES = ("callbacks/default.yaml", "logger/tensorboard.yaml", "logger/csv.yaml", "logger/wandb.yaml",
              "logger/mlflow.yaml")
# (file, key) whose YAML value differs from the schema's on purpose, with the reason in the field's help.
CONF_CHOICES = {
    # GPTConfig is also the Python API, whose default keeps the exact vocabulary; conf/ pads it on CUDA GPUs.
    ("model/base.yaml", "pad_vocab_to"),
}
# (file, key) of an untyped config that restates a schema field's default under another name: (schema, field).
RESTATED = {("eval.yaml", "task_data"): (cb.ZeroShotEval, "data")}
# Schemas whose options reach a gptlab function other than their node's `_target_` (named as a `_target_` is).
CONSUMERS: dict[type, tuple[str, ...]] = {
    s.Muon: ("gptlab.train.muon.MuonAdamW",),  # muon(params, **kwargs) passes them on
    s.NorMuon: ("gptlab.train.normuon.NorMuonAdam",),  # normuon(params, **kwargs) passes them on
    s.Train: ("gptlab.train.module.GPTLitModule",),  # label_smoothing
}


def default_of(f: dataclasses.Field) -> Any:
    """A schema field's default as the config sees it: a value, an interpolation, or "???" (the YAML gives one)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


def same(a: Any, b: Any) -> bool:
    """Equal as config values: 1 == 1.0, but true is not 1, and a tuple default equals the YAML's list."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def is_wiring(value: Any) -> bool:
    """An interpolation, a required value or a nested node (a schema of its own): no value a constructor could copy."""
    return value == REQUIRED or (isinstance(value, str) and "${" in value) or dataclasses.is_dataclass(value)


def yaml_disagreements(where: str, node: DictConfig, schema: type, comments: Optional[dict[str, str]] = None
                       ) -> Iterator[str]:
    """Each key of `node` (read unresolved) whose value differs from `schema`'s default, and each of its trailing
    `comments` (yaml_comments) that differs from the field's help."""
    fields = schema_fields(schema)
    comments = comments or {}
    for key in node:
        f = fields.get(key)
        if f is None or key in ("_target_", "_partial_"):
            continue
        written = OmegaConf.to_container(node, resolve=False)[key]
        default = default_of(f)
        if default != REQUIRED and (where.split(":")[0], key) not in CONF_CHOICES and not same(written, default):
            yield f"conf/{where}: {key}: {written!r} but {schema.__name__}.{key} defaults to {default!r}"
        if key in comments and comments[key] != help_of(f):
            yield f"conf/{where}: {key}'s comment differs from {schema.__name__}.{key}'s help"


def signature_disagreements(where: str, target: Callable, schema: type) -> Iterator[str]:
    """Each parameter of `target` that is a field of `schema` and has a default other than the field's."""
    fields = schema_fields(schema)
    for name, p in inspect.signature(target).parameters.items():
        f = fields.get(name)
        if f is None or p.default is inspect.Parameter.empty or is_wiring(default_of(f)):
            continue
        if not same(p.default, default_of(f)):
            yield f"{where}({name}={p.default!r}) but {schema.__name__}.{name} defaults to {default_of(f)!r}"


def targets_of(schema: type) -> Iterator[tuple[str, Callable]]:
    """The gptlab functions and classes that take `schema`'s options as keyword arguments."""
    from hydra.utils import get_object

    target = getattr(schema, "_target_", None)
    names = ([target] if isinstance(target, str) and target.startswith("gptlab.") else []) + \
        list(CONSUMERS.get(schema, ()))
    for name in names:
        yield name, get_object(name)


def disagreements(conf_dir: Path) -> list[str]:
    """Every copy of an option's default or help in conf/ and in gptlab's signatures that differs from its schema."""
    return [*base_file_copies(conf_dir), *node_copies(conf_dir), *restated_copies(conf_dir), *signature_copies()]


def base_file_copies(conf_dir: Path) -> Iterator[str]:
    for name, schema in BASE_FILES.items():
        text = (conf_dir / name).read_text(encoding="utf-8")
        yield from yaml_disagreements(name, OmegaConf.load(conf_dir / name), schema, yaml_comments(text))


def node_copies(conf_dir: Path) -> Iterator[str]:
    for name in NODE_FILES:
        nodes = OmegaConf.load(conf_dir / name)
        text = (conf_dir / name).read_text(encoding="utf-8")
        schemas = {key: cb.BY_TARGET.get(node.get("_target_")) for key, node in nodes.items()
                   if isinstance(node, DictConfig)}
        for key, schema in schemas.items():
            # A schema several nodes share documents its class; each node states its own values and why.
            if schema is not None and list(schemas.values()).count(schema) == 1:
                yield from yaml_disagreements(f"{name}:{key}", nodes[key], schema, yaml_comments(text, key))
                for target_name, target in targets_of(schema):
                    yield from unwritten_keys(f"{name}:{key}", nodes[key], schema, target_name, target)


def unwritten_keys(where: str, node: DictConfig, schema: type, name: str, target: Callable) -> Iterator[str]:
    """A node that is not typed passes only the keys it writes: one it leaves out gets its constructor's default,
    which must then be one signature_disagreements sees (not behind **kwargs, where a library's own would apply)."""
    params = inspect.signature(target).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        for key in schema_fields(schema):
            if key not in node and key not in params and not key.startswith("_"):
                yield f"conf/{where}: leaves out {key}, which {name}(**kwargs) would pass on with its own default"


def restated_copies(conf_dir: Path) -> Iterator[str]:
    for (name, key), (schema, field) in RESTATED.items():
        written = OmegaConf.to_container(OmegaConf.load(conf_dir / name), resolve=False)[key]
        default = default_of(schema_fields(schema)[field])
        if not same(written, default):
            yield f"conf/{name}: {key}: {written!r} but {schema.__name__}.{field} defaults to {default!r}"


def signature_copies() -> Iterator[str]:
    schemas = {*BASE_FILES.values(), *cb.BY_TARGET.values(), s.TiktokenTokenizer}
    for schema in sorted(schemas, key=lambda x: x.__name__):
        for where, target in targets_of(schema):
            yield from signature_disagreements(where, target, schema)


def yaml_comments(text: str, under: Optional[str] = None) -> dict[str, str]:
    """Each top-level key's trailing comment (or, `under` a top-level node, each of its keys'), with the more
    indented comment lines that continue it."""
    comments: dict[str, str] = {}
    key = None
    indent = "" if under is None else "  "
    inside = under is None
    for line in text.splitlines():
        if under is not None and re.match(r"^\w", line):
            inside = line.startswith(f"{under}:")
            key = None
            continue
        top = re.match(rf"^{indent}(\w+):.*?\s#\s?(.*)$", line) if inside else None
        more = re.match(rf"^{indent}\s+#\s?(.*)$", line)
        if top:
            key = top.group(1)
            comments[key] = top.group(2).strip()
        elif more and key:
            comments[key] += " " + more.group(1).strip()
        else:
            key = None
    return comments
