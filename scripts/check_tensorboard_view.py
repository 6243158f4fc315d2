"""What TensorBoard shows first, read from a real browser: starts `tensorboard --logdir DIR`, opens it in headless
Chromium (1920x1080) and prints the tab it opens on and, in its Time Series and Scalars tabs, the tag groups in order,
each expanded or collapsed, with the charts on the first screen, and the columns of its HParams table.

    python scripts/check_tensorboard_view.py <run dir or sweep dir> [--screenshots DIR]

Exits 1 when a tab does not open with `train/` and `val/` as its first two groups, both expanded, as
docs/run-outputs.md says. Needs Chromium (`apt-get install chromium`) and `pip install playwright`; the test suite
checks the same rule from the event files without them (tests/test_first_view.py).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

from gptlab.errors import ConfigError
from gptlab.launch.arguments import ArgumentParser, existing_dir, writable_dir
from gptlab.launch.cli import user_errors_exit

DOCUMENTED = ["train", "val"]  # docs/run-outputs.md#tensorboard: the first two groups, expanded, in both tabs
VIEWPORT = {"width": 1920, "height": 1080}

# Time Series (Angular): each group is a .card-group; its chevron is expand_less while open; cards have their tag as
# the title of a tb-truncated-path.
TIME_SERIES_JS = """() => [...document.querySelectorAll('metrics-card-groups-component .card-group')].map(g => ({
  name: g.querySelector('.group-title').textContent.trim(),
  expanded: g.querySelector('.expand-group-icon mat-icon').getAttribute('svgicon') === 'expand_less_24px',
  cards: [...g.querySelectorAll('tb-truncated-path.tag')].map(c => [c.title, c.getBoundingClientRect().top]),
}))"""
# Scalars (Polymer, in shadow roots): each group is a tf-category-paginated-view whose category is a prefix group
# (metadata.type 1; type 0 is the tag filter's results); its cards are tf-scalar-card elements.
SCALARS_JS = """() => {
  const views = [], cards = [];
  const walk = root => { for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'TF-CATEGORY-PAGINATED-VIEW' && el.category && el.category.metadata.type === 1) views.push(el);
    if (el.tagName === 'TF-SCALAR-CARD') cards.push(el);
    if (el.shadowRoot) walk(el.shadowRoot);
  } };
  walk(document);
  return views.map(v => ({name: v.category.name, expanded: !!v.opened,
    cards: cards.filter(c => v.category.items.some(i => i.tag === c.tag))
      .map(c => [c.tag, c.getBoundingClientRect().top])}));
}"""
# HParams (Polymer): a vaadin-grid; its first cells, one per column, are the headers.
HPARAMS_JS = """() => {
  const columns = [], cells = [];
  const walk = root => { for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'VAADIN-GRID-COLUMN') columns.push(el);
    if (el.tagName === 'VAADIN-GRID-CELL-CONTENT') cells.push(el.textContent.trim());
    if (el.shadowRoot) walk(el.shadowRoot);
  } };
  walk(document);
  return cells.slice(0, columns.length);
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tensorboard(logdir: Path, port: int) -> subprocess.Popen:
    """TensorBoard on 127.0.0.1:port, once it answers (it reads the event files before its first answer)."""
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port),
                               "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(240):
        if server.poll() is not None:
            raise SystemExit(f"tensorboard exited {server.returncode}: {server.stderr.read()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=1)
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("tensorboard did not answer within 120 s")


def read_stable(page, script: str) -> list:
    """What `script` reads once the page has drawn it and it stopped changing (charts load after the group list)."""
    last, stable = None, 0
    for _ in range(60):
        groups = page.evaluate(script)
        stable = stable + 1 if groups and groups == last else 0
        if stable >= 3:
            return groups
        last = groups
        page.wait_for_timeout(500)
    return last or []


def describe(tab: str, groups: list[dict]) -> list[str]:
    lines = [f"{tab}: groups in order: " + ", ".join(
        f"{g['name']}/ ({'expanded' if g['expanded'] else 'collapsed'})" for g in groups)]
    on_screen = [tag for g in groups for tag, top in g["cards"] if top < VIEWPORT["height"]]
    lines.append(f"{tab}: charts on the first screen: " + (", ".join(on_screen) or "none"))
    return lines


def first_groups_ok(groups: list[dict]) -> bool:
    return [g["name"] for g in groups[:2]] == DOCUMENTED and all(g["expanded"] for g in groups[:2])


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logdir", type=existing_dir,
                        help="a run dir or a sweep dir (what you pass to tensorboard --logdir)")
    parser.add_argument("--screenshots", type=writable_dir, help="write time_series.png and scalars.png into this dir")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium",
                        help="the Chromium executable; default: chromium on PATH")
    args = parser.parse_args()
    if not any(args.logdir.rglob("events.out.tfevents.*")):
        raise ConfigError(f"{args.logdir}: no TensorBoard event files under it; pass a run dir or a sweep dir.")
    if not Path(args.chromium).is_file():
        raise ConfigError(f"--chromium {args.chromium}: no such file; `apt-get install chromium`, or pass its path.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ConfigError("playwright is not installed; `pip install playwright` (it drives the Chromium you have, "
                          "no browser download needed).") from None
    import tensorboard

    port = free_port()
    server = start_tensorboard(args.logdir, port)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport=VIEWPORT)
            print(f"TensorBoard {tensorboard.__version__}, Chromium {browser.version}, "
                  f"playwright {metadata.version('playwright')}, viewport {VIEWPORT['width']}x{VIEWPORT['height']}")
            page.goto(f"http://127.0.0.1:{port}/", wait_until="networkidle")
            time_series = read_stable(page, TIME_SERIES_JS)
            tab = page.locator(".active-plugin-list .mdc-tab--active").first.inner_text().strip()
            print(f"opens on: {tab} ({page.url.rsplit('/', 1)[-1]})")
            shots = [("Time Series", time_series, "time_series.png")]
            if args.screenshots:
                args.screenshots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=args.screenshots / "time_series.png")
            page.goto(f"http://127.0.0.1:{port}/#scalars", wait_until="networkidle")
            scalars = read_stable(page, SCALARS_JS)
            shots.append(("Scalars", scalars, "scalars.png"))
            if args.screenshots:
                page.screenshot(path=args.screenshots / "scalars.png")
            page.goto(f"http://127.0.0.1:{port}/#hparams", wait_until="networkidle")
            hparams_columns = read_stable(page, HPARAMS_JS)
            browser.close()
    finally:
        server.terminate()
        server.wait()
    failed = []
    for tab, groups, _ in shots:
        print("\n".join(describe(tab, groups)))
        if not first_groups_ok(groups):
            failed.append(tab)
    print("HParams: table columns shown: " + (", ".join(hparams_columns) or "none"))
    if failed:
        print(f"NOT as documented: {', '.join(failed)} does not open with {'/ and '.join(DOCUMENTED)}/ expanded first")
        sys.exit(1)
    print(f"as documented: both tabs open with {'/ and '.join(DOCUMENTED)}/ expanded first")


if __name__ == "__main__":
    main()
