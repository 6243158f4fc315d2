"""What `scripts/ablation_report.py --campaign NAME` adds to a sweep's report: the sweep recorded in the campaign's
ledger, its variants tested at the levels the campaign grants, and those verdicts (with the wealth left) as a
section of the report or as the campaign's JSON rows for this sweep's variants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gptlab.campaign import actions, view
from gptlab.campaign.store import store_uri


def sweep_in_campaign(sweep_dir: Path, name: str, store: str | None, as_json: bool) -> str | dict[str, Any]:
    uri = store_uri(store)
    campaign = actions.add(uri, name, sweep_dir)
    here = str(sweep_dir.resolve())
    mine = {r.tag("variant") for r in campaign.of("run") if r.tag("sweep_dir") == here}
    data = view.as_json(campaign)
    data["variants"] = [row for row in data["variants"] if row["variant"] in mine]
    if as_json:
        return data
    lines = [f"\n## In campaign {name} ({data['procedure']}, q={data['q']:g})\n",
             f"{data['tests']} variants tested in the campaign; wealth left {data['wealth_left']:.4g}. Against the "
             f"campaign's baseline ({data['baselines'][-1]}), at the level each test was granted:\n"]
    for row in data["variants"]:
        lines.append(f"- {row['variant']}: {row['status']}" + (
            f", {view.cell(row['verdict'], True)}" if row["verdict"] else ""))
    return "\n".join(lines) + "\n"
