"""The seed bands as the TensorBoard server serves them: the real `tensorboard --logdir <sweep dir>` (a subprocess,
as users start it, on a free port, always killed), read over HTTP at the data routes its frontend fetches for the
Scalars tab and the Custom Scalars tab, with the frontend's own requests (the margin chart's tag regex, its check
that value, lower and upper share their steps). What the frontend draws from them is not seen: no browser here."""

from __future__ import annotations

import importlib.util
import json
import re
import time
import urllib.parse
import urllib.request

import pytest
from helpers import ROOT
from test_report_verdicts import BASE, seeded_sweep

from gptlab.report.runs import group_variants, load_sweep, write_report
from gptlab.report.tensorboard_bands import BANDS_DIR, TAGS, run_name

DEADLINE_S = 300  # the server reads the event files after it answers: poll, however loaded the machine


def _view_script():
    """scripts/check_tensorboard_view.py, whose start_tensorboard the browser check uses too."""
    spec = importlib.util.spec_from_file_location("check_tensorboard_view", ROOT / "scripts" /
                                                  "check_tensorboard_view.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def margin_regex(series: dict) -> str:
    """The tag regex the Custom Scalars margin chart sends (tf-custom-scalar-margin-chart-card's _tagFilter)."""
    tags = (series["value"], series["lower"], series["upper"])
    return "|".join("(" + re.sub(r"([.*+?^${}()|\[\]\\])", r"\\\1", t) + ")" for t in tags)


def test_the_tensorboard_server_serves_each_variants_band_as_the_layout_expects(tmp_path) -> None:
    sweep = seeded_sweep(tmp_path, {"learned": BASE[:3], "rope": [b - 0.1 for b in BASE[:3]]})
    write_report(sweep)
    bands = {f"{BANDS_DIR}/{run_name(v.label)}": v.curve("tokens") for v in group_variants(load_sweep(sweep))}
    view = _view_script()
    port = view.free_port()
    server = view.start_tensorboard(sweep, port)
    try:
        def get(route: str, form: list[tuple[str, str]] | None = None):
            data = urllib.parse.urlencode(form).encode() if form else None
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", data=data, timeout=30) as answer:
                return json.loads(answer.read())

        deadline = time.monotonic() + DEADLINE_S
        while True:  # until every band run's three tags are loaded
            tags = get("/data/plugin/scalars/tags")
            if all(set(TAGS) <= set(tags.get(run, {})) for run in bands) and get("/data/plugin/custom_scalars/layout"):
                break
            assert time.monotonic() < deadline, f"tensorboard served no seed bands within {DEADLINE_S} s: {tags}"
            time.sleep(0.2)
        listing = get("/data/plugins_listing")
        assert listing["scalars"]["enabled"] and listing["custom_scalars"]["enabled"]
        layout = get("/data/plugin/custom_scalars/layout")  # the variants' layouts merged into one chart
        assert [c["title"] for c in layout["category"]] == ["seed bands"]
        (chart,) = layout["category"][0]["chart"]
        (series,) = chart["margin"]["series"]
        assert (series["value"], series["lower"], series["upper"]) == TAGS
        drawn = {}
        for run in get("/data/runs"):  # the chart asks for every selected run: all are, at first
            answer = get("/data/plugin/custom_scalars/scalars?" + urllib.parse.urlencode(
                {"tag": margin_regex(series), "run": run}))
            assert answer["regex_valid"]
            events = answer["tag_to_events"]
            if run not in bands:  # a job's or a band edge's run: none of the three, so the chart skips it in silence
                assert events == {}, run
                continue
            steps = [[e[1] for e in events[t]] for t in TAGS]
            assert steps[0] == steps[1] == steps[2], run  # else the chart shows "steps mismatch" instead
            drawn[run] = [[e[2] for e in events[t]] for t in TAGS]
        assert drawn.keys() == bands.keys()
        for run, band in bands.items():
            assert drawn[run] == [pytest.approx(list(v), rel=1e-6) for v in (band.mean, band.low, band.high)]
            assert band.low.tolist() != band.high.tolist()  # a band, not a line
        for tag, attr in zip(TAGS, ("mean", "low", "high")):  # the Scalars tab: one POST per tag, runs batched
            served = get("/data/plugin/scalars/scalars_multirun", [("tag", tag), *(("runs", r) for r in bands)])
            for run, band in bands.items():
                assert [e[2] for e in served[run]] == pytest.approx(list(getattr(band, attr)), rel=1e-6)
    finally:
        server.terminate()
        server.wait(timeout=60)
