"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, as CI builds it: no broken link
or anchor, every page in the nav. README.md's links into docs/ resolve, every command of a page renders as code,
and the reference tables name every callback, experiment and config option that exists in conf/ (they drifted
before: the README listed 7 of 11 callbacks and 6 of 8 experiments)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import CONF_DIR, HANG_GUARD_S, ROOT
from test_readme import doc_pages, parse_markdown

DOCS = ROOT / "docs"
README_LINK = re.compile(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built once for every test here."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)  # a hang guard: the build takes seconds
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def nav_pages() -> list[str]:
    return [str(path.relative_to(DOCS)) for path in doc_pages()[1:]]


def built_page(site: Path, page: str) -> Path:
    """Where mkdocs writes a page (use_directory_urls: x.md -> x/index.html, index.md -> index.html)."""
    stem = page.removesuffix(".md")
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


def table_names(page: str) -> list[str]:
    """The `name` in the first column of each row of the page's tables."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)


def test_site_builds_strict_and_every_page_is_reachable(site) -> None:
    pages = nav_pages()
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk, "pages in docs/ and in mkdocs.yml's nav differ"
    assert len(pages) == len(set(pages)), "a page is in the nav twice"
    for page in pages:
        assert built_page(site, page).is_file(), page


def test_readme_links_into_docs_resolve(site) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = README_LINK.findall(readme)
    assert len(links) >= 15, "README.md should link to the docs pages"
    for target, anchor in links:
        page = str(Path(target).relative_to("docs"))
        assert (DOCS / page).is_file(), f"README.md links to {target}, which does not exist"
        if anchor:
            assert f'id="{anchor}"' in built_page(site, page).read_text(encoding="utf-8"), f"{target}#{anchor}"


def test_every_command_renders_as_code(site) -> None:
    """An indented block in the wrong place (under a list item, say) renders as a paragraph; the test would
    still run its commands, but a reader would not see them as code."""
    for page in nav_pages():
        rendered = built_page(site, page).read_text(encoding="utf-8")
        code = "\n".join(re.findall(r"<pre[^>]*>(.*?)</pre>", rendered, flags=re.DOTALL))
        code = html.unescape(re.sub(r"<[^>]+>", "", code))  # the highlighter's spans out, then &lt; -> <
        for cmd in parse_markdown((DOCS / page).read_text(encoding="utf-8"), page).commands:
            first_line = cmd.text.splitlines()[0][:40]
            assert first_line in code, f"docs/{page} line {cmd.line}: {first_line!r} is not in a code block"


def test_callbacks_page_names_every_callback() -> None:
    callbacks = yaml.safe_load((CONF_DIR / "callbacks" / "default.yaml").read_text(encoding="utf-8"))
    assert sorted(table_names("callbacks.md")) == sorted(callbacks)


def test_experiments_page_names_every_experiment() -> None:
    experiments = [p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")]
    assert sorted(table_names("experiments.md")) == sorted(experiments)


def test_configuration_page_names_every_group_and_option() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w/]+)` \| (.*?) \|", text, flags=re.MULTILINE)}
    groups = {str(p.parent.relative_to(CONF_DIR)) for p in CONF_DIR.glob("*/**/*.yaml")}
    missing = []
    for group in sorted(groups):
        options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if p.stem != "base")
        if group not in rows:
            missing.append(f"no row for the group {group}")
            continue
        missing += [f"{group}: {option}" for option in options if f"`{option}`" not in rows[group]]
    assert not missing, "docs/configuration.md's groups table misses:\n" + "\n".join(missing)
