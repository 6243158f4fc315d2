"""TensorBoard as a person sees it: a finished sweep (model.norm=pre,post over seeds 1 and 2, its report written)
opened by the real `tensorboard --logdir` in headless Chromium, driven by playwright through
scripts/check_tensorboard_view.py, the check users run by hand. What each tab draws is read from the page (the runs
in each chart's series, the coloured pixels of each Time Series chart), and a screenshot of each tab is saved.

Needs Debian's chromium (`apt-get install chromium`; .ci/run installs it) and playwright (the test extra); without
them the test is skipped with that one line. Without a browser, the HParams declaration is checked from the event
files (test_a_sweep_declares_its_swept_keys_alone) and the served bands over HTTP (test_tensorboard_bands_served)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from helpers import TINY, run_train
from test_tensorboard_bands_served import _view_script as view_script

from gptlab.report.runs import write_report
from gptlab.report.tensorboard_bands import BANDS_DIR, EDGE_RUNS, variant_tag

CHROMIUM = shutil.which("chromium")
VARIANTS = ("model.norm=post", "model.norm=pre")  # the tags' order: by name
needs_browser = pytest.mark.skipif(
    not CHROMIUM or importlib.util.find_spec("playwright") is None,
    reason="needs Chromium and playwright: `apt-get install chromium` and `pip install -e '.[test]'`")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tb_browser")
    run_train(["-m", "seed=1,2", "model.norm=pre,post", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=2",
               "callbacks.text_samples.max_new_tokens=4", f"hydra.sweep.dir={root / 'sweep'}"], cwd=root, check=True)
    write_report(root / "sweep")
    return root / "sweep"


def test_a_sweep_declares_its_swept_keys_alone(sweep: Path) -> None:
    """The HParams table shows its first five declared columns: a sweep job declares its swept keys, marked as
    differing, and no constant (check_memory, data._target_, ... used to fill the screen)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    for events in sorted(sweep.glob("*/tensorboard/*")):
        content = EventAccumulator(str(events)).Reload().PluginTagToContent("hparams")
        experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
        assert sorted((i.name, i.differs) for i in experiment.hparam_infos) == [("model.norm", True), ("seed", True)]
        session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        assert "check_memory" in session.session_start_info.hparams  # the values are all still recorded


@needs_browser
def test_tensorboard_opens_on_each_variants_curve_and_band(sweep: Path, tmp_path: Path) -> None:
    shots = tmp_path / "screenshots"
    view = view_script()
    seen = view.look(sweep, CHROMIUM, shots)
    print(f"{seen['versions']}; screenshots in {shots}")
    assert seen["opens_on"].startswith("TIME SERIES"), seen["opens_on"]
    cards = [variant_tag(v) for v in VARIANTS]
    for tab in ("time_series", "scalars"):
        groups = seen[tab]
        assert view.first_groups_ok(groups, ["seeds", "train"]), view.describe(tab, groups)
        assert view.expected_first_groups(sweep) == ["seeds", "train"]
        first = [(tag, top) for tag, top in groups[0]["cards"]]
        assert [tag for tag, _ in first] == ["seeds/val_loss", *cards], first
        assert all(top < view.VIEWPORT["height"] for _, top in first), first  # all on the first screen
    # Time Series draws its lines on a canvas: each first-screen chart holds line-coloured pixels, not only axes
    for tag in ["seeds/val_loss", *cards]:
        assert seen["time_series_pixels"][tag] > 200, seen["time_series_pixels"]
    # Scalars: the comparison chart draws one line per variant, each variant's chart its mean and band edges
    bands = {f"{BANDS_DIR}/{v}" for v in VARIANTS}
    assert set(seen["scalars_series"]["seeds/val_loss"]) == bands
    for tag in cards:
        assert set(seen["scalars_series"][tag]) == {f"{BANDS_DIR}/{edge}" for edge in EDGE_RUNS}
    # Custom Scalars: the margin chart shades a band (upper above lower) for each variant
    (chart,) = seen["margin_series"]
    assert set(chart["runs"]) == bands, chart
    # HParams: the swept keys are the columns, before the metrics; no constant is shown
    assert seen["hparams_columns"] == ["Trial ID", "Show Metrics", "model.norm", "seed", "val-best/loss",
                                       "val-best/bpb"]
    for name in ("time_series", "scalars", "custom_scalars", "hparams"):
        assert (shots / f"{name}.png").stat().st_size > 10_000
