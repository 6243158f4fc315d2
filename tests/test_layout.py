"""The layout's promises, checked: model/ is plain PyTorch (no Lightning, no Hydra) and GPT does not pull in
generation or HF interop when imported, so model/ has no import cycle; tools read run files without training code."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from helpers import CHECKOUT_ENV, ROOT

MODEL = ROOT / "src" / "gptlab" / "model"
FRAMEWORKS = ("lightning", "pytorch_lightning", "hydra", "omegaconf")


def _imported_modules(code: str) -> list[str]:
    """Every module a fresh interpreter has loaded after running `code`."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=CHECKOUT_ENV, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_model_package_imports_no_framework_and_no_generation_at_import() -> None:
    loaded = _imported_modules("import gptlab.model; from gptlab.model import GPT, GPTConfig")
    assert not [m for m in loaded if m.split(".")[0] in FRAMEWORKS], "gptlab.model pulled in Lightning/Hydra"
    assert "gptlab.model.generation" not in loaded and "gptlab.model.hf_interop" not in loaded


def test_model_sources_name_no_framework() -> None:
    """Also imports inside functions: model/ must work where neither Lightning nor Hydra is installed."""
    for path in MODEL.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.split(".")[0] in FRAMEWORKS or n.startswith(("gptlab.train", "gptlab.data"))]
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_reporting_imports_no_training_code() -> None:
    loaded = _imported_modules("import gptlab.tools.reporting")
    assert "gptlab.train.run" not in loaded and "lightning" not in loaded
