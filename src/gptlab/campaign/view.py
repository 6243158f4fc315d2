"""The campaign as one row per variant (its status, its verdict with level and interval, its confirmation), as
markdown for a person and as JSON (schema version ledger.SCHEMA, docs/campaigns.md) for a script or an agent."""

from __future__ import annotations

from typing import Any

from gptlab.campaign import fdr
from gptlab.campaign.actions import EXPLORE, baseline, baselines, history, untested
from gptlab.campaign.ledger import SCHEMA, Campaign, Record
from gptlab.campaign.verdict import arm_runs, test

VERDICT_KEYS = ("diff", "ci_low", "ci_high", "p", "level", "wealth_left", "index", "seeds_needed")


def _numbers(record: Record | None, keys: tuple[str, ...]) -> dict[str, Any] | None:
    if record is None:
        return None
    out: dict[str, Any] = {k: record.metrics.get(k) for k in keys}
    out.update(test=record.tag("test"), why=record.tag("why"), baseline=record.tag("baseline"),
               seeds=record.tag("seeds").split(",") if record.tag("seeds") else [], status=record.tag("status"))
    return out


def _last(records: list[Record], variant: str) -> Record | None:
    found = [r for r in records if r.tag("variant") == variant]
    return found[-1] if found else None


def _pending(campaign: Campaign, variant: str) -> str:
    mine = arm_runs(campaign, variant, EXPLORE)
    need = int(campaign.settings.get("min_seeds", 3))
    if len(mine) < need:
        return f"untested: {len(mine)} of {need} seeds"
    found = test(arm_runs(campaign, baseline(campaign).tag("variant"), EXPLORE), mine,
                 campaign.settings.get("budget") or None)
    return f"untested: {found.why}" if found.p is None else "untested: run `judge`"


def rows(campaign: Campaign) -> list[dict[str, Any]]:
    current = baseline(campaign).tag("variant")
    former = {r.tag("variant") for r in baselines(campaign)} - {current}
    waiting = set(untested(campaign))
    out = []
    for variant in dict.fromkeys(r.tag("variant") for r in campaign.of("run")):
        verdict = _last(campaign.of("verdict"), variant)
        confirmation = _last(campaign.of("confirmation"), variant)
        status = ("baseline" if variant == current else "former baseline" if variant in former else
                  confirmation.tag("status") if confirmation else
                  _pending(campaign, variant) if variant in waiting or verdict is None else verdict.tag("status"))
        runs = [r for r in campaign.of("run") if r.tag("variant") == variant]
        out.append({"variant": variant, "status": status,
                    "seeds": sorted({r.tag("seed") for r in runs if r.tag("purpose") == EXPLORE}, key=_seed_order),
                    "confirm_seeds": sorted({r.tag("seed") for r in runs if r.tag("purpose") != EXPLORE},
                                            key=_seed_order),
                    "verdict": _numbers(verdict, VERDICT_KEYS),
                    "confirmation": _numbers(confirmation, ("diff", "ci_low", "ci_high", "p", "level"))})
    return out


def _seed_order(seed: str) -> tuple[int, str]:
    return len(seed), seed


def as_json(campaign: Campaign) -> dict[str, Any]:
    q = float(campaign.settings["q"])
    return {"schema": SCHEMA, "campaign": campaign.name, "q": q, "procedure": campaign.settings.get("procedure"),
            "budget": campaign.settings.get("budget") or None, "tests": len(history(campaign)),
            "wealth_left": fdr.wealth_left(history(campaign), q),
            "baselines": [r.tag("variant") for r in baselines(campaign)], "half_written": campaign.half_written,
            "variants": rows(campaign)}


def cell(numbers: dict[str, Any] | None, with_level: bool) -> str:
    if numbers is None:
        return "—"
    text = f"{numbers['diff']:+.4f} [{numbers['ci_low']:+.4f}, {numbers['ci_high']:+.4f}] p={numbers['p']:.3g}"
    return text + (f" at level {numbers['level']:.3g}" if with_level else f" at {numbers['level']:.3g}")


def markdown(campaign: Campaign) -> str:
    data = as_json(campaign)
    lines = [f"# Campaign {campaign.name}", "",
             f"{data['tests']} variants tested by {data['procedure']} at q={data['q']:g}; wealth left "
             f"{data['wealth_left']:.4g}. Baselines: {' → '.join(data['baselines'])}."
             + (f" Budget: matched {data['budget']}." if data["budget"] else ""), "",
             "| variant | status | seeds | vs baseline: diff [interval] p, level granted | confirmed on fresh seeds |",
             "|---|---|---|---|---|"]
    for row in data["variants"]:
        lines.append(f"| {row['variant']} | {row['status']} | {','.join(row['seeds'])} | "
                     f"{cell(row['verdict'], True)} | {cell(row['confirmation'], False)} |")
    if data["half_written"]:
        lines += ["", f"{data['half_written']} record(s) left half-written by a killed command: not counted."]
    return "\n".join(lines) + "\n"
