"""Lightning's (and torch's) private names go through one door, gptlab.lightning_internals: every name it lists still
resolves in the installed version, the Lightning pin in pyproject covers that version, and no other module of
src/gptlab reaches a private name itself. An upgrade that removes one fails here, by name."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import lightning
import pytest
from helpers import ROOT
from packaging.version import Version

from gptlab import lightning_internals
from gptlab.lightning_internals import PRIVATE, resolve

FRAMEWORKS = ("lightning", "pytorch_lightning", "lightning_fabric", "torch")
LOOP_INTERNALS = {"fit_loop", "epoch_loop", "batch_progress", "total_batch_idx"}  # Lightning's loops: not public API
NOT_FRAMEWORK = {  # private names that are not Lightning's or torch's
    ("interop/hf_export.py", "_enc"): "gptlab's own tokenizer's encoding",
    ("interop/hf_export.py", "_mergeable_ranks"): "tiktoken's",
    ("interop/hf_export.py", "_pat_str"): "tiktoken's",
    ("interop/hf_export.py", "_special_tokens"): "tiktoken's",
    ("data/split.py", "_exit"): "os._exit, public",
    ("launch/rank_watch.py", "_exit"): "os._exit, public",
    ("entry_signals.py", "_exit"): "os._exit, public",
    ("launch/fused_launcher.py", "_exit"): "os._exit, public",
    ("train/callbacks/preemption.py", "_exit"): "os._exit, public",
    ("config/suggest.py", "_get_parent"): "omegaconf's node parent (the schema a mistyped key belongs to)",
}


@pytest.mark.parametrize("entry", PRIVATE, ids=[f"{e.used_by}-{e.path}" for e in PRIVATE])
def test_private_symbol_resolves(entry) -> None:
    resolve(entry)  # raises AttributeError "<path> is gone (used by <door function>: <why>)"
    assert callable(getattr(lightning_internals, entry.used_by, None)) or entry.used_by.isupper(), entry.used_by


def test_the_sharded_meta_file_is_lightnings() -> None:
    entry = next(e for e in PRIVATE if e.used_by == "SHARDED_META_FILE")
    assert resolve(entry) == lightning_internals.SHARDED_META_FILE


def test_lightning_pin_covers_the_installed_version_not_the_compromised_ones() -> None:
    from packaging.specifiers import SpecifierSet

    pin = re.search(r'"lightning(>=[\d.]+,<[\d.]+(?:,!=[\d.]+)*)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml must pin lightning to a tested range: lightning>=A,<B (less excluded releases)"
    allowed = SpecifierSet(pin.group(1))
    assert Version(lightning.__version__) in allowed, (pin.group(0), lightning.__version__)
    assert "2.6.2" not in allowed and "2.6.3" not in allowed  # compromised on PyPI: GHSA-w37p-236h-pfx3


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("_")  # not dunders, not Hydra's _target_


def _framework_names(cls: type) -> set[str]:
    """The private names a gptlab class inherits from its Lightning/torch bases: methods, class attributes and the
    attributes their code sets on `self`."""
    names: set[str] = set()
    for base in cls.__mro__:
        if base.__module__.split(".")[0] in FRAMEWORKS:
            names |= {n for n in vars(base) if _private(n)}
            try:
                names |= set(re.findall(r"self\.(_\w+)\s*(?::[^=\n]*)?=[^=]", inspect.getsource(base)))
            except (OSError, TypeError):
                pass
    return names


def _class_strays(module_name: str, tree: ast.AST) -> list[str]:
    """`self._x` and `def _x` in a class that subclasses a Lightning/torch class, where `_x` is the base's."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or not node.bases:
            continue
        cls = getattr(importlib.import_module(module_name), node.name, None)
        inherited = _framework_names(cls) if isinstance(cls, type) else set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self" \
                    and inner.attr in inherited:
                found.append(f"{node.name}: self.{inner.attr} (line {inner.lineno})")
            elif isinstance(inner, ast.FunctionDef) and inner.name in inherited:
                found.append(f"{node.name}: overrides {inner.name} (line {inner.lineno})")
    return found


def _file_strays(rel: str, tree: ast.AST) -> list[str]:
    """Private attributes of other objects, Lightning's loops, and private framework modules or names imported."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            bare_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if (_private(node.attr) and not bare_self and (rel, node.attr) not in NOT_FRAMEWORK) \
                    or node.attr in LOOP_INTERNALS:
                found.append(f"{ast.unparse(node)} (line {node.lineno})")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                if module.split(".")[0] in FRAMEWORKS and (any(_private(p) for p in module.split("."))
                                                           or any(_private(n) for n in names)):
                    found.append(f"import of {module} {names} (line {node.lineno})")
    return found


def strays(package: Path, import_classes: bool = True) -> dict[str, list[str]]:
    """Every reach for a private Lightning/torch name in `package` outside the door, by file."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "lightning_internals.py":
            continue
        tree = ast.parse(path.read_text())
        hits = _file_strays(rel, tree)
        if import_classes:
            module = ".".join(("gptlab", *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
            hits += _class_strays(module, tree)
        if hits:
            found[rel] = hits
    return found


def test_no_module_outside_the_door_reaches_a_private_name() -> None:
    found = strays(ROOT / "src" / "gptlab")
    listed = "\n".join(f"{path}: {hits}" for path, hits in found.items())
    assert not found, f"private Lightning/torch names outside gptlab.lightning_internals (add a door there):\n{listed}"


def test_the_scan_sees_each_kind_of_reach(tmp_path: Path) -> None:
    """The scan itself: a private attribute, a loop, a private import, and a Lightning base's private names."""
    source = ("import lightning as L\nfrom torch.utils._pytree import tree_leaves\n"
              "from lightning.pytorch.callbacks import ModelCheckpoint\n"
              "def f(trainer):\n    trainer._logger_connector.log_metrics = None\n"
              "    return trainer.fit_loop.epoch_loop.total_batch_idx\n")
    hits = _file_strays("x.py", ast.parse(source))
    assert any("_logger_connector" in h for h in hits) and any("total_batch_idx" in h for h in hits)
    assert any("torch.utils._pytree" in h for h in hits)
    inherited = _framework_names(lightning.pytorch.callbacks.ModelCheckpoint)
    assert {"_save_last_checkpoint", "_last_checkpoint_saved", "_monitor_candidates"} <= inherited
