"""The campaign's records in the tracking store. A campaign is an MLflow experiment (tagged gptlab.campaign); each
training run, verdict, confirmation and baseline change is an MLflow run in it, tagged gptlab.kind. A record is
written whole or not at all for a reader: it is created, filled in one log_batch and only then marked FINISHED;
readers take FINISHED records only, so a writer killed half-way leaves a RUNNING record that nothing counts (the
list names how many)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gptlab.campaign.store import client, retried, sqlite_path
from gptlab.errors import ConfigError

SCHEMA = 1  # the ledger's tag layout and the JSON's version (docs/campaigns.md)
TAG = "gptlab."
KINDS = ("run", "verdict", "confirmation", "baseline")
BUDGETS = ("tokens", "flops", "seconds")  # the budget setting: what verdicts are matched at (campaign.verdict)
UI_KIND = "mlflow.experimentKind"  # the MLflow UI's view of an experiment (3.x)
MAX_TAG = 5000  # MLflow's limit on a tag value is 8000 characters


@dataclass
class Record:
    kind: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    start: int = 0  # the store's start time, ms: the order records were written in
    run_id: str = ""

    def tag(self, key: str, default: str = "") -> str:
        return self.tags.get(TAG + key, default)


@dataclass
class Campaign:
    name: str
    experiment_id: str
    settings: dict[str, str]  # q, procedure, budget, schema, created (the experiment's gptlab.* tags)
    records: list[Record]
    half_written: int  # records a killed writer left RUNNING: never counted

    def of(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.kind == kind]


def _experiment(mlflow: Any, name: str) -> Any:
    found = retried(lambda: mlflow.get_experiment_by_name(name))
    if found is not None and found.tags.get(TAG + "campaign") != "1":
        raise ConfigError(f"campaign {name}: the store holds an MLflow experiment {name!r} that is not a gptlab "
                          "campaign (a logger's?); name the campaign otherwise, e.g. campaign-" + name)
    if found is not None and found.lifecycle_stage != "active":
        raise ConfigError(f"campaign {name} was deleted in the store; restore it (mlflow experiments restore) or "
                          "name a new campaign.")
    return found


def create(uri: str, name: str, settings: dict[str, str]) -> str:
    mlflow = client(uri)
    if _experiment(mlflow, name) is not None:
        raise ConfigError(f"campaign {name} exists already in {uri}; add to it (scripts/campaign.py run {name} ...) "
                          "or name a new one.")
    tags = {TAG + "campaign": "1", TAG + "schema": str(SCHEMA), **{TAG + k: v for k, v in settings.items()},
            UI_KIND: "custom_model_development"}  # MLflow's UI then opens it on its runs, not on GenAI traces
    return retried(lambda: mlflow.create_experiment(name, tags=tags))


def load(uri: str, name: str) -> Campaign:
    start = f"start one: python scripts/campaign.py init {name} --baseline-sweep <sweep dir>"
    path = sqlite_path(uri)
    if path is not None and not path.is_file():  # reading must not create a store
        raise ConfigError(f"no campaign {name} in {uri} (no such file yet); {start}")
    mlflow = client(uri)
    found = _experiment(mlflow, name)
    if found is None:
        raise ConfigError(f"no campaign {name} in {uri}; {start}")
    records, half = [], 0
    token = None
    while True:
        page = retried(lambda at=token: mlflow.search_runs([found.experiment_id], max_results=1000, page_token=at,
                                                           order_by=["attributes.start_time ASC"]))
        for run in page:
            if run.info.status != "FINISHED" or run.data.tags.get(TAG + "kind") not in KINDS:
                half += run.info.status != "FINISHED"
                continue
            records.append(Record(run.data.tags[TAG + "kind"], dict(run.data.tags), dict(run.data.params),
                                  dict(run.data.metrics), run.info.start_time, run.info.run_id))
        token = page.token
        if not token:
            break
    records.sort(key=lambda r: (int(r.tag("seq", "0")), r.start))
    settings = {k[len(TAG):]: v for k, v in found.tags.items() if k.startswith(TAG)}
    return Campaign(name, found.experiment_id, settings, records, half)


def write(uri: str, campaign: Campaign, record: Record, name: str = "") -> str:
    """Create, fill, then finish: until the last call the record is RUNNING and no reader counts it."""
    from mlflow.entities import Metric, Param, RunTag

    mlflow = client(uri)
    seq = max([int(r.tag("seq", "0")) for r in campaign.records] + [0]) + 1
    tags = {**record.tags, TAG + "kind": record.kind, TAG + "seq": str(seq), "mlflow.runName": name or record.kind}
    run = retried(lambda: mlflow.create_run(campaign.experiment_id, tags={"mlflow.runName": name or record.kind}))
    rid = run.info.run_id
    now = run.info.start_time
    retried(lambda: mlflow.log_batch(
        rid, metrics=[Metric(k, float(v), now, 0) for k, v in record.metrics.items() if v is not None],
        params=[Param(k, str(v)[:6000]) for k, v in record.params.items()],
        tags=[RunTag(k, str(v)[:MAX_TAG]) for k, v in tags.items()]))
    retried(lambda: mlflow.set_terminated(rid, "FINISHED"))
    record.tags, record.run_id, record.start = tags, rid, now
    campaign.records.append(record)
    return rid


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
