"""The package layout's rules, checked over every import (function-level and TYPE_CHECKING ones included):
each concern has one package, packages import only from lower layers, no module imports itself back through
others, model/ is plain PyTorch, and no package or function grows past what one reader holds in mind.

The layers, lowest first (docs/architecture.md explains each); a package imports from lower layers only, and
packages on the same layer do not import each other:

    0  gptlab (errors, atomic, signals)    base utilities
    1  model                               the GPT as a plain nn.Module
    2  checkpoint | config                 the checkpoint file; typed config schemas, their checks and rules
    3  data                                corpora and batches (its ranges are the config schema's)
    4  runs                                run dirs and sweep jobs: files, the one-run lock, resume, failures
    5  execution                           how the model runs: parallelize (compile, checkpointing, FSDP), kernels
    6  preflight                           the checks made once before anything is built: machine, memory, disk
    7  launch                              entry scripts' errors, Hydra callbacks, DDP rank launch, GPU launcher
    8  interop                             Hugging Face in and out
    9  eval                                zero-shot tasks, scoring, sampling
   10  train                               the LightningModule, optimizers, callbacks
   11  apps                                what the entry scripts call
   12  report | tools                      reading runs; benchmarks, doctor, drills: only campaign imports these
   13  campaign                            a campaign's ledger, online-FDR verdicts, confirmations (on report's tests)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import CHECKOUT_ENV, ROOT

PACKAGE = ROOT / "src" / "gptlab"
LAYER = {"gptlab": 0, "model": 1, "checkpoint": 2, "config": 2, "data": 3, "runs": 4, "execution": 5, "preflight": 6,
         "launch": 7, "interop": 8, "eval": 9, "train": 10, "apps": 11, "report": 12, "tools": 12,
         "campaign": 13}
FRAMEWORKS = ("lightning", "pytorch_lightning", "hydra", "omegaconf")
MAX_FUNCTION_LINES = 60
MAX_PACKAGE_SHARE = 0.20


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module named by an import anywhere in the file: `from a.b import c` names a.b, and a.b.c too when
    that is a module (so `from gptlab.train import module` counts as an edge to gptlab.train.module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in files and m != name} for name, path in files.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYER) else "gptlab"


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(LAYER), f"packages without a layer in this test's table: {sorted(packages - set(LAYER))}"


# The package root (src/gptlab/__init__.py) is the public facade users import (`gptlab.load`): it sits above every
# layer, and imports what it offers inside its functions, so importing any gptlab module never runs it further.
FACADE = "gptlab"


def test_imports_run_only_downward() -> None:
    upward = []
    for module, deps in _graph().items():
        if module == FACADE:
            continue
        here = _package(module)
        for dep in deps:
            there = _package(dep)
            if there != here and LAYER[there] >= LAYER[here]:
                upward.append(f"{module} -> {dep} ({here} is layer {LAYER[here]}, {there} layer {LAYER[there]})")
    assert not upward, "imports that do not run downward:\n" + "\n".join(sorted(upward))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    assert not _cycles(_graph())


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_model_sources_name_no_framework() -> None:
    """Also imports inside functions: model/ must work where neither Lightning nor Hydra is installed."""
    for path in (PACKAGE / "model").glob("*.py"):
        bad = [m for m in _imports(path) if m.split(".")[0] in FRAMEWORKS]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def _loaded_modules(code: str) -> list[str]:
    """Every module a fresh interpreter has loaded after running `code`."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=CHECKOUT_ENV, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_model_package_loads_no_framework() -> None:
    loaded = _loaded_modules("import gptlab.model; from gptlab.model import GPT, GPTConfig")
    assert not [m for m in loaded if m.split(".")[0] in FRAMEWORKS], "gptlab.model pulled in Lightning/Hydra"


def test_report_loads_no_training_code() -> None:
    loaded = _loaded_modules("import gptlab.report.runs")
    assert "gptlab.apps.train" not in loaded and "lightning" not in loaded


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_fit_on_a_screen(path: Path) -> None:
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_package_holds_more_than_a_fifth_of_the_code() -> None:
    lines: dict[str, int] = defaultdict(int)
    for path in PACKAGE.rglob("*.py"):
        lines[_package(_module_name(path))] += len(path.read_text().splitlines())
    total = sum(lines.values())
    big = {p: f"{n / total:.0%}" for p, n in lines.items() if n > MAX_PACKAGE_SHARE * total}
    assert not big, f"packages over {MAX_PACKAGE_SHARE:.0%} of src/gptlab's {total} lines: {big}"
