"""What a GPU machine without network needs carried, made here (`--prepare`) and installed there from .whl/.

The lent GPU machines have torch, Lightning, tiktoken, tensorboard and pytest, but not hydra-core, omegaconf, antlr4
(Hydra's parser) or torchao (runtime.float8), and no network. `prepare` downloads their wheels into .whl/
(git-ignored: carried with the run, never committed) and fetches GPT-2's BPE ranks into data/cache/tiktoken;
`install_missing` installs, there, the wheels of the modules that python cannot import, into a folder of its own.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from gptlab.tools.gpu_check.parts import ROOT

WHEEL_DIR = ROOT / ".whl"
RANKS = Path("data") / "cache" / "tiktoken" / "gpt2.tiktoken"
# module -> (requirement, wheel file prefix). The GPU machines run Python 3.12 and torch 2.11 (torchao 0.17's).
WHEELS = {"hydra": ("hydra-core==1.3.8", "hydra_core-"), "omegaconf": ("omegaconf==2.3.0", "omegaconf-"),
          "antlr4": ("antlr4-python3-runtime==4.9.3", "antlr4_python3_runtime-"),
          "torchao": ("torchao==0.17.0", "torchao-")}
SOURCE_ONLY = {"antlr4"}  # published as a source archive only: built into a wheel here
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
            *(f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
                                          "manylinux2014_x86_64"))]
SITE = Path(tempfile.gettempdir()) / "gptlab-gpu-check-site"


def prepare() -> list[str]:
    """Download every wheel in WHEELS into .whl/ and fetch the GPT-2 ranks: the commands it ran."""
    WHEEL_DIR.mkdir(exist_ok=True)
    commands = []
    for module, (requirement, prefix) in WHEELS.items():
        if any(WHEEL_DIR.glob(f"{prefix}*.whl")):
            continue
        how = (["wheel", "--no-deps", "-w"] if module in SOURCE_ONLY else ["download", "--no-deps", *PLATFORM, "-d"])
        commands.append([sys.executable, "-m", "pip", *how, str(WHEEL_DIR), requirement])
    if not (ROOT / RANKS).is_file():
        commands.append([sys.executable, str(ROOT / "scripts" / "fetch_gpt2_ranks.py")])
    for command in commands:
        subprocess.run(command, cwd=ROOT, check=True)
    return [" ".join(c) for c in commands]


def missing_modules() -> list[str]:
    return [module for module in WHEELS if importlib.util.find_spec(module) is None]


def install_missing() -> tuple[str, str]:
    """(a folder for PYTHONPATH, or "" when nothing was installed; one line saying what was done)."""
    missing = missing_modules()
    if not missing:
        return "", "setup: nothing to install (hydra-core, omegaconf, antlr4 and torchao import)"
    wheels = [w for module in missing for w in sorted(WHEEL_DIR.glob(f"{WHEELS[module][1]}*.whl"))]
    lacking = [m for m in missing if not any(WHEEL_DIR.glob(f"{WHEELS[m][1]}*.whl"))]
    note = (f"; {', '.join(lacking)} missing with no wheel in .whl/ (parts that need it fail or skip): run "
            "`python scripts/gpu_check.py --prepare` where pip reaches PyPI and carry .whl") if lacking else ""
    if not wheels:
        return "", f"setup: nothing installed{note}"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", str(SITE), *map(str, wheels)],
                          capture_output=True, text=True)
    if done.returncode:
        return "", f"setup: pip install from .whl failed ({done.returncode}): {done.stderr.strip()[-300:]}{note}"
    return str(SITE), f"setup: installed {', '.join(w.name for w in wheels)} into {SITE}{note}"
