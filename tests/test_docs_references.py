"""Every citation of the spec in code, configs and README resolves to a section of docs/ in this repository:
"eq. N" to docs/model.md's equation N, "[SN]" to its source N, "docs/<file>.md" to a file that exists; and
nothing cites documents the repository does not hold (DESIGN §, seed 00N, ../shared)."""

from __future__ import annotations

import re
import subprocess

from helpers import ROOT

DOCS = ROOT / "docs"


def cited_files() -> list:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / f for f in listed if f.endswith((".py", ".yaml", ".md", ".toml")) and (ROOT / f).is_file()]


def test_every_spec_citation_resolves() -> None:
    model_md = (DOCS / "model.md").read_text(encoding="utf-8")
    problems = []
    for path in cited_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for n in re.findall(r"\beqs?\. ?(\d+)", text):
            if f"**eq. {n}**" not in model_md:
                problems.append(f"{where}: eq. {n} is not in docs/model.md")
        for n in re.findall(r"\[S(\d+)\]", text):
            if f"**[S{n}]**" not in model_md:
                problems.append(f"{where}: [S{n}] is not a source in docs/model.md")
        for name in re.findall(r"docs/([\w-]+\.md)", text):
            if not (DOCS / name).is_file():
                problems.append(f"{where}: docs/{name} does not exist")
        if where.parts[0] != "tests":  # this file names the patterns it forbids
            for stale in ("DESIGN §", "seed 00", "../shared"):
                if stale in text:
                    problems.append(f"{where}: cites {stale!r}, which is not in the repository")
    assert not problems, "\n".join(problems)


def test_docs_cover_formulas_presets_and_layout() -> None:
    model_md = (DOCS / "model.md").read_text(encoding="utf-8")
    assert all(f"**eq. {n}**" in model_md for n in range(1, 14))
    presets = (DOCS / "presets.md").read_text(encoding="utf-8")
    for preset in (ROOT / "conf" / "model").glob("*.yaml"):
        if preset.stem != "base":
            assert f"`{preset.stem}`" in presets, f"docs/presets.md has no row for {preset.stem}"
    layout = (DOCS / "layout.md").read_text(encoding="utf-8")
    for item in ("config_resolved.yaml", "run_summary.json", "manifest.json", "data/cache/tiktoken"):
        assert item in layout


def test_pyprojects_comments_name_what_exists() -> None:
    """A dependency's comment names the gptlab code that needs it: each such name (`gptlab.x.y`, or a class's
    method `GPT.name`) must exist (pyproject named GPT.from_pretrained, which never did)."""
    import importlib

    import gptlab.model

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    problems = []
    for dotted in re.findall(r"\bgptlab(?:\.\w+)+", text):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for name in parts[cut:]:
                obj = getattr(obj, name, None)
            break
        if obj is None:
            problems.append(dotted)
    for cls, method in re.findall(r"\b([A-Z]\w*)\.(\w+)\b", text):
        owner = getattr(gptlab.model, cls, None)
        if owner is not None and not hasattr(owner, method):
            problems.append(f"{cls}.{method}")
    assert not problems, f"pyproject.toml names what does not exist: {problems}"
