"""What TensorBoard shows first, read from a real browser: starts `tensorboard --logdir DIR`, opens it in headless
Chromium (1920x1080) and prints the tab it opens on; in its Time Series and Scalars tabs, the tag groups in order,
each expanded or collapsed, with the charts on the first screen; the runs drawn by the seed-band charts and the Custom
Scalars margin chart; and the columns of its HParams table.

    python scripts/check_tensorboard_view.py <run dir or sweep dir> [--screenshots DIR]

Exits 1 when a tab does not open with the groups docs/run-outputs.md says, both expanded: `train/` and `val/` for a
run, `seeds/` and `train/` for a sweep dir whose report wrote seed bands. Needs Chromium (`apt-get install chromium`)
and `pip install playwright`; tests/test_tensorboard_browser.py runs it on a sweep, and tests/test_first_view.py
checks the run's rule from the event files without a browser.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

from gptlab.errors import ConfigError
from gptlab.launch.arguments import ArgumentParser, existing_dir, writable_dir
from gptlab.launch.cli import user_errors_exit
from gptlab.report.tensorboard_bands import BANDS_DIR

DOCUMENTED = ["train", "val"]  # docs/run-outputs.md#tensorboard: a run's first two groups, expanded, in both tabs
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
# Scalars and Custom Scalars (Polymer): each chart is a vz-line-chart2 whose series cache is keyed by [name, run];
# the margin chart is the one that fills an area between its lower and upper series.
SCALARS_SERIES_JS = """() => {
  const out = [];
  const walk = root => { for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'TF-SCALAR-CARD') {
      const chart = [...el.shadowRoot.querySelectorAll('*')]
        .map(c => c.shadowRoot ? [c, ...c.shadowRoot.querySelectorAll('vz-line-chart2')] : [c]).flat()
        .find(c => c.tagName === 'VZ-LINE-CHART2');
      const drawn = chart ? Object.entries(chart._seriesDataCache || {}).filter(([, d]) => d && d.length) : [];
      out.push([el.tag, drawn.map(([k]) => JSON.parse(k)[1])]);
    }
    if (el.shadowRoot) walk(el.shadowRoot);
  } };
  walk(document);
  return out.filter(([tag]) => tag.startsWith('seeds/'));
}"""
MARGIN_SERIES_JS = """() => {
  const out = [];
  const walk = root => { for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'TF-CUSTOM-SCALAR-MARGIN-CHART-CARD') {
      const charts = [];
      const find = r => { for (const c of r.querySelectorAll('*')) {
        if (c.tagName === 'VZ-LINE-CHART2' && c.fillArea) charts.push(c); if (c.shadowRoot) find(c.shadowRoot); } };
      find(el.shadowRoot || el);
      // series keyed "<value tag> (<run>)", each point with its lower and upper: a band where they differ
      const bands = charts.flatMap(c => Object.entries(c._seriesDataCache || {}))
        .filter(([, d]) => d && d.length && d.some(p => p.upper > p.lower)).map(([k]) => k.match(/\\((.*)\\)$/)[1]);
      out.push({title: el.title, runs: bands});
    }
    if (el.shadowRoot) walk(el.shadowRoot);
  } };
  walk(document);
  return out;
}"""
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


def read_stable(page, script: str, ready=bool) -> list:
    """What `script` reads once the page has drawn it, `ready` holds and it stopped changing (charts load after the
    group list)."""
    last, stable = None, 0
    for _ in range(120):
        groups = page.evaluate(script)
        stable = stable + 1 if groups and groups == last and ready(groups) else 0
        if stable >= 3:
            return groups
        last = groups
        page.wait_for_timeout(500)
    return last or []


def colored_pixels(png: bytes) -> int:
    """Pixels of a chart's screenshot that are a line's colour, not the grey of axes, grid and text."""
    import io

    from PIL import Image

    pixels = Image.open(io.BytesIO(png)).convert("HSV").getdata()
    return sum(1 for _, saturation, value in pixels if saturation > 80 and value > 60)


def line_pixels(page) -> dict[str, int]:
    """The line-coloured pixels of each chart of Time Series' first group on the first screen, once every such chart
    has some and they stopped changing (the lines are drawn after the cards are laid out, later on a busy machine)."""
    last: dict[str, int] = {}
    for _ in range(60):
        cards = page.locator("metrics-card-groups-component .card-group").first.locator("scalar-card-component")
        now = {card.locator("tb-truncated-path.tag").first.get_attribute("title"):
               colored_pixels(card.locator("canvas").first.screenshot())
               for card in cards.all()
               if card.locator("canvas").count() and card.bounding_box()["y"] < VIEWPORT["height"]}
        if now and now == last and all(now.values()):
            return now
        last = now
        page.wait_for_timeout(500)
    return last


def expected_first_groups(logdir: Path) -> list[str]:
    """docs/run-outputs.md#tensorboard: `seeds/` (the report's bands) then `train/` where a report wrote seed bands
    under the dir, else `train/` and `val/`."""
    return ["seeds", "train"] if any(logdir.rglob(BANDS_DIR)) else DOCUMENTED


def look(logdir: Path, chromium: str, screenshots: Path | None = None) -> dict:
    """Opens TensorBoard on `logdir` in headless Chromium and reads what each tab shows: the tab it opens on, the tag
    groups of Time Series and Scalars (each expanded or not, with its charts and where they are), how many line-
    coloured pixels each of Time Series' first charts holds, the runs each Scalars chart and each Custom Scalars
    margin chart draws, and the HParams table's columns. Writes a screenshot of each tab into `screenshots`."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_tensorboard(logdir, port)
    seen: dict = {}

    def shot(page, name: str) -> None:
        if screenshots:
            screenshots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=screenshots / name)

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport=VIEWPORT)
            seen["versions"] = (f"TensorBoard {version('tensorboard')}, Chromium {browser.version}, playwright "
                                f"{version('playwright')}, viewport {VIEWPORT['width']}x{VIEWPORT['height']}")
            page.goto(f"http://127.0.0.1:{port}/", wait_until="networkidle")
            seen["time_series"] = read_stable(page, TIME_SERIES_JS)
            tab = page.locator(".active-plugin-list .mdc-tab--active").first.inner_text().strip()
            seen["opens_on"] = f"{tab} ({page.url.rsplit('/', 1)[-1]})"
            seen["time_series_pixels"] = line_pixels(page)
            shot(page, "time_series.png")
            page.goto(f"http://127.0.0.1:{port}/#scalars", wait_until="networkidle")
            seen["scalars"] = read_stable(page, SCALARS_JS)
            seen["scalars_series"] = dict(read_stable(page, SCALARS_SERIES_JS, lambda got: all(r for _, r in got)))
            shot(page, "scalars.png")
            page.goto(f"http://127.0.0.1:{port}/#custom_scalars", wait_until="networkidle")
            seen["margin_series"] = read_stable(page, MARGIN_SERIES_JS, lambda got: all(c["runs"] for c in got))
            shot(page, "custom_scalars.png")
            page.goto(f"http://127.0.0.1:{port}/#hparams", wait_until="networkidle")
            seen["hparams_columns"] = read_stable(page, HPARAMS_JS)
            shot(page, "hparams.png")
            browser.close()
    finally:
        server.terminate()
        server.wait()
    return seen


def describe(tab: str, groups: list[dict]) -> list[str]:
    lines = [f"{tab}: groups in order: " + ", ".join(
        f"{g['name']}/ ({'expanded' if g['expanded'] else 'collapsed'})" for g in groups)]
    on_screen = [tag for g in groups for tag, top in g["cards"] if top < VIEWPORT["height"]]
    lines.append(f"{tab}: charts on the first screen: " + (", ".join(on_screen) or "none"))
    return lines


def first_groups_ok(groups: list[dict], expected: list[str]) -> bool:
    return [g["name"] for g in groups[:2]] == expected and all(g["expanded"] for g in groups[:2])


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logdir", type=existing_dir,
                        help="a run dir or a sweep dir (what you pass to tensorboard --logdir)")
    parser.add_argument("--screenshots", type=writable_dir, help="write a PNG of each tab into this dir")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium",
                        help="the Chromium executable; default: chromium on PATH")
    args = parser.parse_args()
    if not any(args.logdir.rglob("events.out.tfevents.*")):
        raise ConfigError(f"{args.logdir}: no TensorBoard event files under it; pass a run dir or a sweep dir.")
    if not Path(args.chromium).is_file():
        raise ConfigError(f"--chromium {args.chromium}: no such file; `apt-get install chromium`, or pass its path.")
    try:
        import playwright  # noqa: F401
    except ImportError:
        raise ConfigError("playwright is not installed; `pip install playwright` (it drives the Chromium you have, "
                          "no browser download needed).") from None
    seen = look(args.logdir, args.chromium, args.screenshots)
    print(seen["versions"])
    print(f"opens on: {seen['opens_on']}")
    expected, failed = expected_first_groups(args.logdir), []
    for tab in ("Time Series", "Scalars"):
        groups = seen["time_series" if tab == "Time Series" else "scalars"]
        print("\n".join(describe(tab, groups)))
        if not first_groups_ok(groups, expected):
            failed.append(tab)
    print("Time Series: line pixels of the first group's charts: " +
          ", ".join(f"{tag} {n}" for tag, n in seen["time_series_pixels"].items()))
    for tag, runs in seen["scalars_series"].items():
        print(f"Scalars: {tag}: {', '.join(runs)}")
    for chart in seen["margin_series"]:
        print(f"Custom Scalars: margin chart {chart['title']!r}: a band for {', '.join(chart['runs'])}")
    print("HParams: table columns shown: " + (", ".join(seen["hparams_columns"]) or "none"))
    if failed:
        print(f"NOT as documented: {', '.join(failed)} does not open with {'/ and '.join(expected)}/ expanded first")
        sys.exit(1)
    print(f"as documented: both tabs open with {'/ and '.join(expected)}/ expanded first")


if __name__ == "__main__":
    main()
