"""What the campaign command does to the ledger, each under the store's write lock so that concurrent commands
see each other's records: start a campaign, record a sweep's runs, test every variant not yet tested against the
current baseline (in the order they were recorded, at the levels LORD++ grants), test a claimed variant's
confirmation runs, and promote a confirmed variant to baseline."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gptlab.campaign import fdr, ledger
from gptlab.campaign.ledger import BUDGETS, TAG, Campaign, Record
from gptlab.campaign.store import writing
from gptlab.campaign.verdict import arm_runs, interval, seeds_needed, test
from gptlab.errors import ConfigError
from gptlab.report.stats import MIN_SEEDS

EXPLORE, CONFIRM = "explore", "confirm"


def baselines(campaign: Campaign) -> list[Record]:
    return campaign.of("baseline")


def baseline(campaign: Campaign) -> Record:
    return baselines(campaign)[-1]


def baseline_overrides(campaign: Campaign) -> dict[str, str]:
    return json.loads(baseline(campaign).tag("overrides", "{}"))


def root(campaign: Campaign) -> tuple[dict[str, str], str]:
    """The first baseline's overrides and name: what every variant's name is a diff against."""
    first = baselines(campaign)[0]
    return json.loads(first.tag("overrides", "{}")), first.tag("variant")


def start(uri: str, name: str, sweep: Path, q: float, budget: str | None, label: str = "baseline") -> Campaign:
    """A new campaign whose first baseline is the sweep's one variant (its seeds), recorded with its runs."""
    from gptlab.campaign.runs import sweep_records

    if not 0 < q < 1:
        raise ConfigError(f"--q {q}: the campaign's false discovery rate is a fraction, e.g. --q 0.05.")
    if budget is not None and budget not in BUDGETS:
        raise ConfigError(f"--budget {budget}: one of {', '.join(BUDGETS)}.")
    label = label or "baseline"
    with writing(uri):
        settings = {"q": repr(q), "procedure": fdr.PROCEDURE, "budget": budget or "", "min_seeds": str(MIN_SEEDS),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        ledger.create(uri, name, settings)
        campaign = ledger.load(uri, name)
        runs = sweep_records(sweep, campaign, {}, ({}, label), label)
        configs = sorted({r.tag("overrides") for r in runs})
        if len(configs) != 1:
            raise ConfigError(f"{sweep}: a campaign's baseline sweep holds one variant (its seeds only); it holds "
                              f"{len(configs)}: {'; '.join(configs) or 'no finished job'}. Pass the baseline's sweep "
                              "alone.")
        overrides = runs[0].tag("overrides")
        ledger.write(uri, campaign, Record("baseline", {TAG + "variant": label, TAG + "overrides": overrides,
                                                        TAG + "previous": ""}), "baseline 1")
        for run in runs:
            ledger.write(uri, campaign, run, f"{run.tag('variant')} seed {run.tag('seed')}")
        return campaign


def add(uri: str, name: str, sweep: Path, label: str | None = None, purpose: str = EXPLORE,
        judge_now: bool = True, device: str | None = None) -> Campaign:
    """Record the sweep's runs not yet in the ledger; then test what is ready."""
    from gptlab.campaign.runs import sweep_records

    with writing(uri):
        campaign = ledger.load(uri, name)
        for run in sweep_records(sweep, campaign, baseline_overrides(campaign), root(campaign), label, purpose,
                                 device):
            ledger.write(uri, campaign, run, f"{run.tag('variant')} seed {run.tag('seed')}")
        if judge_now:
            judge_locked(uri, campaign)
        return campaign


def judge(uri: str, name: str) -> Campaign:
    with writing(uri):
        campaign = ledger.load(uri, name)
        judge_locked(uri, campaign)
        return campaign


def history(campaign: Campaign) -> list[float]:
    return [r.metrics["p"] for r in campaign.of("verdict")]


def untested(campaign: Campaign) -> list[str]:
    """Variants with runs but no verdict yet, in the order their first run was recorded (a variant tested against an
    earlier baseline keeps that verdict: testing it again would spend the campaign's wealth twice on one idea)."""
    base = baseline(campaign).tag("variant")
    done = {r.tag("variant") for r in campaign.of("verdict")} | {r.tag("variant") for r in baselines(campaign)}
    order = [r.tag("variant") for r in campaign.of("run") if r.tag("purpose") == EXPLORE]
    return [v for v in dict.fromkeys(order) if v != base and v not in done]


def judge_locked(uri: str, campaign: Campaign) -> None:
    """Each untested variant with enough seeds gets its test and the level LORD++ grants it, in order."""
    base = baseline(campaign).tag("variant")
    q = float(campaign.settings["q"])
    for variant in untested(campaign):
        mine = arm_runs(campaign, variant, EXPLORE)
        if len(mine) < int(campaign.settings.get("min_seeds", MIN_SEEDS)):
            continue
        found = test(arm_runs(campaign, base, EXPLORE), mine, campaign.settings.get("budget") or None)
        if found.p is None:
            continue
        granted = fdr.next_test(history(campaign), found.p, q)
        low, high = interval(found.comparison, granted.level)
        comp = found.comparison
        tags = {TAG + "variant": variant, TAG + "baseline": base, TAG + "test": comp.test, TAG + "why": found.why,
                TAG + "status": "claimed" if granted.rejected else "not claimed",
                TAG + "seeds": ",".join(sorted(r.tag("seed") for r in mine))}
        metrics = {"diff": comp.diff, "p": found.p, "p_two_sided": comp.p, "level": granted.level,
                   "wealth_left": granted.wealth, "ci_low": low, "ci_high": high, "index": granted.index,
                   "seeds_baseline": comp.seeds[0], "seeds_variant": comp.seeds[1],
                   "seeds_needed": seeds_needed(comp, granted.level)}
        ledger.write(uri, campaign, Record("verdict", tags, {}, {k: v for k, v in metrics.items() if v is not None}),
                     f"verdict {variant}: {tags[TAG + 'status']}")  # the outcome in the UI's run list


def arm_seeds(campaign: Campaign, variant: str) -> list[int]:
    return sorted({int(r.tag("seed")) for r in campaign.of("run")
                   if r.tag("variant") == variant and r.tag("purpose") == EXPLORE})


def variant_of(campaign: Campaign, run: Record) -> str:
    """The name the run's overrides give it (its variant unless it was labelled)."""
    from gptlab.campaign.runs import variant_key

    return variant_key(json.loads(run.tag("overrides", "{}")), None, root(campaign))
