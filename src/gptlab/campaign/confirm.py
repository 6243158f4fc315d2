"""Claimed is not won: a claimed variant is re-run with the baseline on seeds the campaign never used, and only a
one-sided test of those fresh runs at the campaign's q confirms it (a replication of one pre-chosen hypothesis, so
no further correction). A confirmed variant can become the baseline; the ledger keeps the chain."""

from __future__ import annotations

import json

from gptlab.campaign import ledger
from gptlab.campaign.actions import CONFIRM, baseline
from gptlab.campaign.ledger import TAG, Campaign, Record
from gptlab.campaign.store import writing
from gptlab.campaign.verdict import arm_runs, interval, test
from gptlab.errors import ConfigError


def seeds_used(campaign: Campaign) -> set[int]:
    return {int(r.tag("seed")) for r in campaign.of("run") if r.tag("seed").lstrip("-").isdigit()}


def fresh_seeds(campaign: Campaign, n: int) -> list[int]:
    """n seeds above every seed the campaign has run, so no confirmation reuses one a variant was chosen on."""
    top = max(seeds_used(campaign) | {0})
    return list(range(top + 1, top + 1 + n))


def verdict_of(campaign: Campaign, variant: str) -> Record | None:
    found = [r for r in campaign.of("verdict") if r.tag("variant") == variant]
    return found[-1] if found else None


def claimed(campaign: Campaign, variant: str) -> Record:
    verdict = verdict_of(campaign, variant)
    if verdict is None or verdict.tag("status") != "claimed":
        state = "has no verdict" if verdict is None else f"is {verdict.tag('status')}"
        raise ConfigError(f"variant {variant!r} {state} in campaign {campaign.name}: only a claimed win is confirmed; "
                          f"list them with python scripts/campaign.py list {campaign.name}")
    return verdict


def judge_confirmation(uri: str, name: str, variant: str) -> Record:
    """Test the confirm-purpose runs of the variant against the baseline's, at q, and record the outcome."""
    with writing(uri):
        campaign = ledger.load(uri, name)
        claim = claimed(campaign, variant)
        base = claim.tag("baseline")
        mine = arm_runs(campaign, variant, CONFIRM)
        seeds = {r.tag("seed") for r in mine}
        theirs = [r for r in arm_runs(campaign, base, CONFIRM) if r.tag("seed") in seeds]
        found = test(theirs, mine, campaign.settings.get("budget") or None)
        if found.p is None:
            raise ConfigError(f"confirmation of {variant!r} cannot be tested: {found.why}; run it again with more "
                              f"seeds: python scripts/campaign.py confirm {name} --variant '{variant}' --seeds 5")
        q = float(campaign.settings["q"])
        low, high = interval(found.comparison, q)
        tags = {TAG + "variant": variant, TAG + "baseline": base, TAG + "test": found.comparison.test,
                TAG + "why": found.why, TAG + "status": "confirmed" if found.p <= q else "not confirmed",
                TAG + "seeds": ",".join(sorted(r.tag("seed") for r in mine))}
        metrics = {"diff": found.comparison.diff, "p": found.p, "level": q, "ci_low": low, "ci_high": high}
        record = Record("confirmation", tags, {}, metrics)
        ledger.write(uri, campaign, record, f"confirmation {variant}: {tags[TAG + 'status']}")
        return record


def promote(uri: str, name: str, variant: str) -> Record:
    """The confirmed variant becomes the baseline that later verdicts are against."""
    with writing(uri):
        campaign = ledger.load(uri, name)
        done = [r for r in campaign.of("confirmation") if r.tag("variant") == variant]
        if not done or done[-1].tag("status") != "confirmed":
            state = done[-1].tag("status") if done else "not confirmed yet"
            raise ConfigError(f"variant {variant!r} is {state}: only a confirmed win becomes the baseline; confirm it "
                              f"first: python scripts/campaign.py confirm {name} --variant '{variant}'")
        runs = [r for r in campaign.of("run") if r.tag("variant") == variant]
        previous = baseline(campaign).tag("variant")
        record = Record("baseline", {TAG + "variant": variant, TAG + "previous": previous,
                                     TAG + "overrides": runs[0].tag("overrides", json.dumps({}))})
        ledger.write(uri, campaign, record, f"baseline {len(campaign.of('baseline')) + 1}")
        return record
