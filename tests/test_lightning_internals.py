"""Every private Lightning/torch name gptlab uses (one list: gptlab.launch.lightning_internals) still resolves,
and the Lightning pin in pyproject covers the installed version. An upgrade that removes one fails here, by name."""

from __future__ import annotations

import re

import lightning
import pytest
from helpers import ROOT
from packaging.version import Version

from gptlab.launch.lightning_internals import PRIVATE, resolve


@pytest.mark.parametrize("entry", PRIVATE, ids=[e.path for e in PRIVATE])
def test_private_symbol_resolves(entry) -> None:
    resolve(entry)  # raises AttributeError "<path> is gone (used by <file>: <why>)"


def test_every_private_use_in_the_code_is_listed() -> None:
    """A new private access in src/ must join the list (the names it walks, e.g. `_get_file_writer`)."""
    listed = {part for e in PRIVATE for part in e.path.replace(":", ".").split(".")}
    found = 0
    private = re.compile(r"(?:fit_loop\.[\w.]+|\b(?:experiment|pl_launcher|strategy)\.(_\w+))")
    for path in (ROOT / "src").rglob("*.py"):
        if path.name == "lightning_internals.py":
            continue
        for match in private.finditer(path.read_text()):
            names = match.group(1) or match.group(0)
            missing = [n for n in names.split(".") if n not in listed]
            found += 1
            assert not missing, f"{path}: {match.group(0)} uses {missing}, not in gptlab.launch.lightning_internals"
    assert found >= 4  # the scan sees the known uses (hydra_ddp, hparams, throughput, position)


def test_lightning_pin_covers_the_installed_version() -> None:
    pin = re.search(r'"lightning>=([\d.]+),<([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml must pin lightning to a tested range: lightning>=A,<B"
    lower, upper = pin.groups()
    assert Version(lower) <= Version(lightning.__version__) < Version(upper), (pin.group(0), lightning.__version__)
