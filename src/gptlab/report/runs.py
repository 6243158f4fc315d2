"""Summarise a Hydra sweep: jobs grouped into variants (every differing override but `seed`), each variant's
across-seed statistics against a baseline (gptlab.report.stats), and a val/loss plot with bands
(gptlab.report.plot)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from gptlab.atomic import atomic_write_text
from gptlab.errors import ConfigError
from gptlab.launch.continuing import sweep_command
from gptlab.model import GPTConfig
from gptlab.model.accounting import count_parameters, training_flops_per_token
from gptlab.recorded import build_recorded
from gptlab.report.choices import BANDS, CORRECTIONS, TESTS, X_AXES
from gptlab.report.instability import DEFINITIONS, Stability, classify
from gptlab.report.job_scalars import probe_peaks, read_scalars, series
from gptlab.report.membership import job_dirs, missing_jobs, screen
from gptlab.report.output_dir import report_dir
from gptlab.report.override_values import same_text, typed
from gptlab.report.plot import X_LABELS, plot_val_loss
from gptlab.report.stats import MIN_SEEDS, Band, Comparison, Summary, mean_curve, value_at, verdict
from gptlab.report.tensorboard_bands import BANDS_DIR, write_seed_bands
from gptlab.report.verdict_text import power_section, ranking, tests_paragraph, worth_note
from gptlab.report.verdicts import judge
from gptlab.runs.one_run import SWEEP_FILES
from gptlab.runs.run_dir import FAILURE_FILE, RESOLVED_CONFIG, SUMMARY_FILE
from gptlab.runs.sweep_failures import describe, failed_jobs
from gptlab.train.stages import tokens_trained

SEED_KEY = "seed"  # the axis averaged over, never a variant


@dataclass(frozen=True)
class ValPoint:
    tokens: int  # tokens trained on when validation ran (gptlab.train.stages.tokens_trained)
    seconds: float  # wall-clock since the job's first TensorBoard event
    loss: float
    step: int = 0  # the optimizer steps done (TensorBoard's step of the point)


@dataclass(frozen=True)
class ModelCost:
    """From the job's config_resolved.yaml through gptlab.model.accounting, so runs from before any of these
    numbers were logged get them too. Non-embedding = total − token embedding − learned positions."""

    parameters: int
    non_embedding: int
    flops_per_token: int  # training (forward + backward = 3 × forward), PaLM app. B


@dataclass
class JobResult:
    job_dir: Path
    overrides: dict[str, str]
    summary: dict
    val_curve: list[ValPoint]
    cost: ModelCost | None = None
    cost_error: str | None = None  # why `cost` is missing (an old config that no longer builds, say)
    tokens_seen: int | None = None  # tokens trained on (job_tokens), the summary's where no step count is recorded
    stability: Stability = field(default_factory=lambda: Stability("unknown", "no train/loss logged"))
    attn_logit_max: float | None = None  # the largest attention logit its stability probes saw (None: no probes)
    log_z_max: float | None = None  # the largest |log Z| of the output logits they saw

    def x_values(self, axis: str) -> list[float]:
        if axis == "seconds":
            return [p.seconds for p in self.val_curve]
        if axis == "steps":
            return [float(p.step) for p in self.val_curve]
        scale = 1 if axis == "tokens" else self.cost.flops_per_token
        return [float(p.tokens * scale) for p in self.val_curve]


@dataclass
class Variant:
    """The jobs of one setting of the differing overrides, one per seed."""

    label: str
    overrides: dict[str, str]
    jobs: list[JobResult] = field(default_factory=list)

    def values(self, key: str) -> list[float | None]:
        return [job.summary.get(key) for job in self.jobs]

    def summary(self, key: str) -> Summary | None:
        return Summary.of(self.values(key))

    @property
    def cost(self) -> ModelCost | None:
        return self.jobs[0].cost

    @property
    def unstable_note(self) -> str:
        """`, 1 of 3 unstable` for the plot's legend; empty when every seed was stable or unjudged."""
        count = stability_count(self.jobs)
        return "" if count in ("stable", "—") else f", {count}"

    def curve(self, axis: str, band: str = "minmax") -> Band | None:
        return mean_curve([(job.x_values(axis), [p.loss for p in job.val_curve]) for job in self.jobs], band)


def _unreadable(path: Path, err: Exception, what: str) -> ConfigError:
    return ConfigError(f"{path} cannot be read ({type(err).__name__}: {str(err).splitlines()[0][:200]}): it should "
                       f"be {what}; restore it, or move its job dir out of the sweep dir to report without it.")


def _read_summary(path: Path) -> dict:
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise _unreadable(path, err, "the JSON object src/train.py writes at the end of a job") from err
    if not isinstance(summary, dict) or not isinstance(summary.get("tokens_per_step"), int):
        raise _unreadable(path, ValueError("no tokens_per_step"), "the JSON object src/train.py writes at the end of "
                          "a job")
    return summary


def read_overrides(job_dir: Path) -> dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    try:
        items = yaml.safe_load(path.read_text()) if path.exists() else []
    except (OSError, yaml.YAMLError) as err:
        raise _unreadable(path, err, "the list of key=value overrides Hydra writes") from err
    if not isinstance(items, (list, type(None))) or not all(isinstance(item, str) for item in items or []):
        raise _unreadable(path, ValueError(f"not a list of strings: {items!r}"[:200]), "the list of key=value "
                          "overrides Hydra writes")
    return dict(item.split("=", 1) for item in items or [] if "=" in item)


def val_curve(scalars: dict, start: float | None, tokens_at: Callable[[int], int]) -> list[ValPoint]:
    """The val/loss points of a job's scalars (report.job_scalars), in steps, tokens trained (`tokens_at(step)`)
    and seconds since its first event."""
    points = scalars.get("val/loss", {})
    if start is None:  # an event file without events came first: time from the first point instead
        start = min((wall for wall, _ in points.values()), default=0.0)
    return [ValPoint(tokens_at(step), wall - start, loss, step) for step, (wall, loss) in sorted(points.items())]


def job_tokens(job_dir: Path, summary: dict) -> Callable[[int], int]:
    """Tokens a job trained on before each step, counted as its run counted them: tokens_per_step a step, less the
    rows stages.batch_sizes skips (read from its config_resolved.yaml; an unreadable one counts whole steps)."""
    tokens_per_step = int(summary.get("tokens_per_step") or 0)
    try:
        cfg = yaml.safe_load((job_dir / RESOLVED_CONFIG).read_text())
        max_steps = int((cfg.get("trainer") or {}).get("max_steps") or -1)
        total = max_steps if max_steps > 0 else int(summary.get("global_step") or 0)
        tokens_trained(cfg, 1, tokens_per_step, max(total, 1))  # raises here on a config it cannot read
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError):
        return lambda step: step * tokens_per_step
    return lambda step: tokens_trained(cfg, step, tokens_per_step, max(total, 1))


_VOCAB_CACHE: dict[str, int] = {}


def _tokenizer_vocab(tokenizer_cfg: dict, source: Path) -> int:
    """The id count of the tokenizer the file `source` records (a trusted class only: gptlab.recorded), for presets
    whose vocab_size is null (taken from the tokenizer at training)."""
    key = json.dumps(tokenizer_cfg, sort_keys=True)
    if key not in _VOCAB_CACHE:
        _VOCAB_CACHE[key] = build_recorded(tokenizer_cfg, "tokenizer", str(source)).vocab_size
    return _VOCAB_CACHE[key]


def job_model(job_dir: Path) -> GPTConfig:
    """The model config a job trained, from its resolved config."""
    path = job_dir / RESOLVED_CONFIG
    if not path.exists():
        raise ConfigError(f"{path} is missing")
    cfg = yaml.safe_load(path.read_text())
    model = dict(cfg["model"])
    vocab = model["vocab_size"] if model.get("vocab_size") is not None else _tokenizer_vocab(cfg["tokenizer"], path)
    return GPTConfig.for_tokenizer(model, vocab)


def model_cost(job_dir: Path) -> ModelCost:
    """Parameters and training FLOPs per token of the model a job trained, from its resolved config."""
    gpt = job_model(job_dir)
    counts = count_parameters(gpt)
    return ModelCost(counts["total"], counts["total"] - counts["embedding"] - counts["position"],
                     training_flops_per_token(gpt)["total"])


def failure_line(record: dict) -> str:
    """`job (overrides): kind: reason` for a failure record that runs.sweep_failures wrote."""
    return f"{describe(record)}: {record.get('kind', 'failed')}: {record.get('reason', '?')}"


def read_job(job_dir: Path, overrides: dict[str, str], summary: dict) -> JobResult:
    """A job with its val/loss curve, model cost, stability verdict and probe peaks, from its files."""
    scalars, start = read_scalars(job_dir)
    tokens_at = job_tokens(job_dir, summary)
    job = JobResult(job_dir, overrides, summary, val_curve(scalars, start, tokens_at))
    steps = summary.get("global_step")  # counted from the config, so runs that counted the loader's tokens agree
    job.tokens_seen = tokens_at(steps) if isinstance(steps, int) else summary.get("tokens_seen")
    uniform = None
    try:
        gpt = job_model(job_dir)
        uniform = math.log(gpt.padded_vocab_size)
        job.cost = model_cost(job_dir)
    except Exception as exc:  # noqa: BLE001 - any unreadable old config: the report goes on without the cost
        job.cost_error = f"{type(exc).__name__}: {exc}"
    final = summary.get("final_val_loss")
    diverged = summary.get("diverged") or (f"final val/loss {final}" if isinstance(final, float)
                                           and not math.isfinite(final) else None)
    job.stability = classify(series(scalars, "train/loss"), diverged, uniform)
    job.attn_logit_max, job.log_z_max = probe_peaks(scalars)
    return job


def is_sweep_dir(path: Path) -> bool:
    """A dir a `-m` launch made: its sweep_config.json (gptlab's) or multirun.yaml (Hydra's) at the top."""
    return any((path / name).is_file() for name in SWEEP_FILES)


def load_sweep(sweep_dir: Path) -> list[JobResult]:
    """The sweep's finished jobs; foreign and damaged dirs are left out (report.membership) and named in the
    report's closing section."""
    if sweep_dir.exists() and not sweep_dir.is_dir():  # issue 46: a file was told it "does not exist"
        raise ConfigError(f"sweep dir {sweep_dir} is a file, not a directory; pass the dir a `-m` run printed"
                          + (f" (this file's dir is {sweep_dir.parent})." if sweep_dir.name == SUMMARY_FILE else "."))
    if not sweep_dir.is_dir():
        raise ConfigError(f"sweep dir {sweep_dir} does not exist; pass the dir a `-m` run printed.")
    screened = screen(sweep_dir)
    jobs = [read_job(d, read_overrides(d), _read_summary(d / SUMMARY_FILE)) for d in screened.members
            if (d / SUMMARY_FILE).exists()]
    if not jobs:
        failed = [failure_line(record) for record in failed_jobs(sweep_dir)]
        left = [f"{name} ({why})" for name, why in screened.left_out]
        if not failed and not left and is_sweep_dir(sweep_dir):
            started = [p.name for p in job_dirs(sweep_dir)]
            raise ConfigError(
                f"no job of the sweep in {sweep_dir} has finished yet ({len(started)} job dir(s) without a "
                f"{SUMMARY_FILE}{': ' + ', '.join(started[:8]) if started else ''}{', ...' if len(started) > 8 else ''}"
                f"): it is still running, or it was stopped; continue it with {sweep_command(sweep_dir)}, then run "
                "this report again.")
        raise ConfigError(
            f"no finished job (with {SUMMARY_FILE}) under {sweep_dir}; "
            + (f"every job failed: {'; '.join(failed)}; to run them again, delete their {FAILURE_FILE} and launch "
               "the same sweep command (a relaunch skips a job that failed before)" if failed else
               f"left out: {'; '.join(left)}; restore those files, or move the dirs out of the sweep dir"
               if left else "not a sweep dir of `train.py -m`: pass the dir a `python src/train.py -m` run printed")
        )
    return jobs


def drop_repeats(jobs: list[JobResult]) -> tuple[list[JobResult], list[str]]:
    """Jobs launched with the same overrides (`seed=1,1`) are one run twice, not independent seeds: each is counted
    once, and a note names the repeats for the report."""
    first: dict[tuple, JobResult] = {}
    kept, notes = [], []
    for job in jobs:
        key = tuple(sorted(job.overrides.items()))
        if key in first:
            same = ", ".join(f"{k}={v}" for k, v in key) or "no overrides"
            notes.append(f"job {job.job_dir.name} repeats job {first[key].job_dir.name} ({same}): counted once")
        else:
            first[key] = job
            kept.append(job)
    return kept, notes


def differing_keys(jobs: list[JobResult]) -> list[str]:
    keys = sorted({k for job in jobs for k in job.overrides})
    return [k for k in keys if len({job.overrides.get(k) for job in jobs}) > 1]


def group_variants(jobs: list[JobResult], axes: tuple[str, ...] = (SEED_KEY,)) -> list[Variant]:
    """One variant per setting of the differing overrides other than `axes` (the seed; for an LR-tuned or ladder
    report also the LR or the size), in the order of their first job."""
    keys = [k for k in differing_keys(jobs) if k not in axes]
    variants: dict[tuple, Variant] = {}
    for job in jobs:
        setting = tuple(job.overrides.get(k, "") for k in keys)
        if setting not in variants:
            label = ", ".join(f"{k}={v}" for k, v in zip(keys, setting)) or "all jobs"
            variants[setting] = Variant(label, dict(zip(keys, setting)))
        variants[setting].jobs.append(job)
    return list(variants.values())


def parse_baseline(spec: str) -> dict[str, str]:
    """`k=v[,k2=v2]`, or a variant's label as the report prints it (`k=v, k2=v2`); a value may hold commas
    (`model.attn_pattern=[dense,local]`): only a comma followed by `key=` starts a new pair."""
    pairs = re.split(r",(?=[^,=\[\]]+=)", spec)
    if not spec or any("=" not in p for p in pairs):
        raise ConfigError(f"--baseline {spec!r} is not k=v[,k2=v2]; e.g. --baseline model.norm=pre.")
    return {key.strip(): value.strip() for key, value in (p.split("=", 1) for p in pairs)}  # a label's ", "


def pick_baseline(variants: list[Variant], spec: str | None) -> Variant:
    """The first variant, or the one `--baseline` names (it must name exactly one); values compare as Hydra types
    them, so `false`/`False` and `1e-3`/`0.001` name the same variant (report.override_values)."""
    if spec is None:
        return variants[0]
    wanted = parse_baseline(spec)
    for key, value in wanted.items():
        try:
            typed(key, value)
        except ValueError as err:
            raise ConfigError(f"--baseline {key}={value}: {err}; spell the value as on the sweep's command line "
                              f"(e.g. --baseline {key}=false).") from None
    def named(v: Variant) -> bool:
        mine = v.jobs[0].overrides
        return all(k in mine and same_text(k, mine[k], val) for k, val in wanted.items())

    matches = [v for v in variants if named(v)]
    if len(matches) != 1:
        which = "matches no variant" if not matches else f"matches {len(matches)} variants"
        raise ConfigError(f"--baseline {spec} {which}; the variants are: "
                          + "; ".join(v.label for v in variants) + ". Name one of them (k=v[,k2=v2]).")
    return matches[0]


def default_x(variants: list[Variant]) -> str:
    """FLOPs when the variants' FLOPs per token differ (a bigger model must not look better for spending more),
    else tokens."""
    costs = [v.cost for v in variants]
    if all(costs) and len({c.flops_per_token for c in costs}) > 1:
        return "flops"
    return "tokens"


def matched_flops(variants: list[Variant]) -> tuple[float | None, list[float | None]]:
    """The largest training FLOPs every variant reached, and each variant's mean val/loss curve read there."""
    if not all(job.cost for v in variants for job in v.jobs):
        return None, [None] * len(variants)
    bands = [v.curve("flops") for v in variants]
    if not all(bands):
        return None, [None] * len(variants)
    budget = min(float(b.x[-1]) for b in bands)
    return budget, [value_at(b, budget) for b in bands]


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def fmt_summary(s: Summary | None, spec: str = ".4f") -> str:
    if s is None:
        return "—"
    return format(s.mean, spec) if s.n == 1 else f"{format(s.mean, spec)} ± {format(s.std, spec)}"


def _fmt_diff(c: Comparison | None) -> tuple[str, str]:
    if c is None:
        return "baseline", ""
    if not c.testable:
        return f"{c.diff:+.4f} ({c.no_test}: no test possible)", "—"
    notes = ([] if c.significant else ["no difference found"]) + ([f"little power: n<{MIN_SEEDS}"] if c.low_power
                                                                   else [])
    p = f"{c.p:.3g}" + (f" (Holm {c.p_family:.3g})" if c.p_family is not None else "")
    return (f"{c.diff:+.4f} [{c.ci_low:+.4f}, {c.ci_high:+.4f}]",
            f"{p} {'paired' if c.paired else 'Welch'}" + (f" ({'; '.join(notes)})" if notes else ""))


def _more(value: int | None, base: int | None) -> str:
    """`875,392 (+16,384 over the baseline)` for a count above the baseline's; the count alone otherwise."""
    if value is None:
        return "—"
    return f"{value:,}" + (f" (+{value - base:,} over the baseline)" if base and value > base else "")


def cost_note(variant: Variant, base: Variant) -> str:
    """What a verdict at matched tokens does not match: the variant's parameters and FLOPs per token against the
    baseline's, when they differ; MORE when the variant has more, since it may win by size or compute, not design."""
    if variant is base or variant.cost is None or base.cost is None:
        return ""
    notes = []
    for what, mine, theirs in (("parameters", variant.cost.parameters, base.cost.parameters),
                               ("FLOPs per token", variant.cost.flops_per_token, base.cost.flops_per_token)):
        if mine != theirs:
            mark = f"MORE {what.upper()}" if mine > theirs else f"fewer {what}"
            notes.append(f"{mark}: {mine:,} against the baseline's {theirs:,} ({mine - theirs:+,}, "
                         f"{(mine - theirs) / theirs:+.2%})")
    return "; ".join(notes)


def tokens_note(variants: list[Variant]) -> str:
    """What the verdicts' final val/loss is matched on: the tokens every job trained on (job_tokens)."""
    jobs = [job for v in variants for job in v.jobs]
    seen = {job.tokens_seen for job in jobs}
    known = sorted(t for t in seen if isinstance(t, int))
    if len(seen) == 1 and known:
        return (f"Compared at matched tokens (every job trained on {known[0]:,} tokens), not at matched FLOPs or "
                "parameters: a variant with more parameters or FLOPs per token than the baseline is marked MORE "
                "PARAMETERS or MORE FLOPS PER TOKEN (it may win by size or compute). The table's val loss @ matched "
                "FLOPs reads each variant at one compute budget, without a test.\n\n")
    by_tokens: dict[object, list[str]] = {}
    for v in variants:
        for tokens in sorted({job.tokens_seen for job in v.jobs}, key=str):
            by_tokens.setdefault(tokens, []).append(v.label)
    groups = sorted(by_tokens.items(), key=lambda item: len(item[1]))
    shown = "; ".join(f"{', '.join(labels[:4])}{' and others' if len(labels) > 4 else ''}: "
                      f"{tokens:,}" if isinstance(tokens, int) else f"{', '.join(labels[:4])}: unrecorded"
                      for tokens, labels in groups)
    staged = any(isinstance(job.tokens_seen, int) and isinstance(job.summary.get("global_step"), int)
                 and job.tokens_seen < job.summary["global_step"] * int(job.summary.get("tokens_per_step") or 0)
                 for job in jobs)
    why = (" stages.batch_sizes trains a step on fewer rows than the loader gives, so its runs train fewer tokens in "
           "the same steps;" if staged else "")
    return (f"Not at matched tokens: the jobs trained on different or unrecorded numbers of tokens ({shown}), so a "
            f"final val/loss compares runs of different length;{why} read val loss @ matched FLOPs, which compares "
            f"them at one compute budget, or give every arm the same trainer.max_steps, data.batch_size and "
            f"stages.batch_sizes.\n\n")


def seeds_note(variants: list[Variant], sweep_dir: Path | None = None) -> str:
    """The report's warning when an arm has fewer than MIN_SEEDS seeds with a final val/loss: where the launch made
    the seeds and their jobs are missing from the sweep dir, it names those and the command that runs them."""
    few = [(v.label, n) for v in variants if 0 < (n := sum(x is not None for x in v.values(METRIC))) < MIN_SEEDS]
    if not few:
        return ""
    text = f"**Fewer than {MIN_SEEDS} seeds in an arm**: " + ", ".join(f"{label} (n={n})" for label, n in few) + "."
    if any(n > 1 for _, n in few):
        text += (" With 2 seeds in an arm the test has little power: a real difference can go unfound, so \"no "
                 "difference found\" says little, and a significant one rests on two runs.")
    if any(n == 1 for _, n in few):
        text += " With 1 seed no test is possible: there is no spread to test against."
    absent = missing_jobs(sweep_dir) if sweep_dir is not None else None
    if absent:
        return text + (f" The sweep launched more: its job{'s' if len(absent) > 1 else ''} {'; '.join(absent)} "
                       f"{'are' if len(absent) > 1 else 'is'} missing from the sweep dir; run "
                       f"{'them' if len(absent) > 1 else 'it'} with {sweep_command(sweep_dir)} (the sweep launched "
                       "again into its dir runs only what it lacks).\n\n")
    return text + f" Launch with seed=1,2,3 (or more) for a verdict with {MIN_SEEDS} seeds an arm.\n\n"


METRIC = "final_val_loss"  # the one compared against the baseline: every variant saw the same tokens by then


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def variant_table(variants: list[Variant], comps: list[Comparison | None], at_budget: list[float | None],
                  alpha: float, base: Variant, worths: list[str] | None = None) -> str:
    level = f"{1 - alpha:.0%}"
    base_cost = base.cost
    header = ["variant", "n", "best val/loss", "final val/loss", "best val bpb", "final val bpb", "tokens/s",
              "parameters", "non-embedding", "FLOPs/token", "val loss @ matched FLOPs",
              f"Δ final val/loss ({level} CI)", "p", "worth in compute", "stability"]
    rows = []
    for v, comp, at, worth in zip(variants, comps, at_budget, worths or [""] * len(variants)):
        cost = v.cost
        diff, p = _fmt_diff(comp)
        row = [v.label, str(len(v.jobs)), fmt_summary(v.summary("best_val_loss")),
               fmt_summary(v.summary("final_val_loss")), fmt_summary(v.summary("best_val_bpb")),
               fmt_summary(v.summary("final_val_bpb")), fmt_summary(v.summary("tokens_per_sec"), ",.0f"),
               _more(cost and cost.parameters, base_cost and base_cost.parameters),
               _fmt(cost and cost.non_embedding, ","),
               _more(cost and cost.flops_per_token, base_cost and base_cost.flops_per_token), _fmt(at, ".4f"), diff, p,
               worth, stability_count(v.jobs)]
        rows.append(row)
    return markdown(header, rows)


def markdown_table(jobs: list[JobResult]) -> str:
    """One row per job, seed included: the raw numbers behind each variant's mean."""
    keys = differing_keys(jobs)
    header = ["job", *keys, "parameters", "best val/loss", "final val/loss", "tokens/s", "initial train/loss",
              "stability"]
    rows = [[job.job_dir.name, *(job.overrides.get(k, "") for k in keys),
             _fmt(job.cost.parameters if job.cost else job.summary.get("parameters"), ","),  # as the variants count
             _fmt(job.summary.get("best_val_loss"), ".4f"), _fmt(job.summary.get("final_val_loss"), ".4f"),
             _fmt(job.summary.get("tokens_per_sec"), ",.0f"), initial_cell(job.stability),
             job.stability.label()] for job in jobs]
    return markdown(header, rows)


def initial_cell(st: Stability) -> str:
    """The measured initial loss and the step it was logged at."""
    return "—" if st.initial is None else f"{st.initial:.4f} (step {st.initial_step})"


def stability_count(jobs: list[JobResult]) -> str:
    """`stable`, or how many of the jobs were unstable or diverged, e.g. `1 of 3 unstable`."""
    kinds = Counter(job.stability.kind for job in jobs)
    if kinds["unknown"] == len(jobs):
        return "—"  # no job logged train/loss
    bad = [f"{kinds[k]} of {len(jobs)} {k}" for k in ("diverged", "unstable", "unknown") if kinds[k]]
    return ", ".join(bad) or "stable"


def stability_note(jobs: list[JobResult]) -> str:
    """The definitions, and a warning when the initial loss was logged after the first step."""
    late = [job.job_dir.name for job in jobs if job.stability.initial is not None and not job.stability.at_init]
    text = DEFINITIONS + "\n\n"
    if late:
        text += (f"Jobs {', '.join(late)} logged their first train/loss after the first step (trainer."
                 f"log_every_n_steps > 1), so their initial loss is not the untrained model's: a rise before it goes "
                 f"unseen. Set trainer.log_every_n_steps=1 to measure it.\n\n")
    return text


def jobs_section(jobs: list[JobResult], sweep_dir: Path, counted: set[str] = frozenset()) -> str:
    """Every report's closing section: the jobs it read, then those it could not (failed, killed or running)."""
    return "\n## Jobs\n\n" + markdown_table(jobs) + missing_jobs_note(sweep_dir, counted)


def check_options(x: str | None, band: str) -> None:
    """The plot's options; --alpha, --margin and --effect are ranges that the script's parser refuses
    (gptlab.launch.arguments), as it does --x and --band when typed."""
    if x is not None and x not in X_AXES:
        raise ConfigError(f"--x {x!r} is not one of {', '.join(X_AXES)}.")
    if band not in BANDS:
        raise ConfigError(f"--band {band!r} is not one of {', '.join(BANDS)}.")


def check_verdict_options(test: str, correction: str) -> None:
    if test not in TESTS or correction not in CORRECTIONS:
        raise ConfigError(f"--test {test} --correction {correction}: use --test {' or '.join(TESTS)} and --correction "
                          f"{' or '.join(CORRECTIONS)}.")


def missing_jobs_note(sweep_dir: Path, counted: set[str] = frozenset()) -> str:
    """The failed jobs with their reasons, the dirs left out as foreign or damaged with theirs, and the job dirs
    with neither a run summary nor a failure record (killed, crashed or still running) with the last word of their
    log; but those in `counted` (a report that reads them otherwise)."""
    text = ""
    screened = screen(sweep_dir)
    members = {p.name for p in screened.members}
    failed = [failure_line(record) for record in failed_jobs(sweep_dir)
              if record["job"] not in counted and record["job"] in members]
    if failed:
        text += "\n## Failed jobs (left out)\n\n" + "".join(f"- {line}\n" for line in failed)
    if screened.left_out:
        text += ("\n## Not this sweep's jobs, or damaged (left out)\n\n"
                 + "".join(f"- {name}: {why}\n" for name, why in screened.left_out))
    missing = [p for p in job_dirs(sweep_dir) if not (p / SUMMARY_FILE).exists()
               and not (p / FAILURE_FILE).exists() and p.name not in counted]
    if missing:
        text += ("\n## Jobs without a finished run (left out)\n\n"
                 + "".join(f"- {p.name}: {unfinished_reason(p)}\n" for p in missing))
    absent = missing_jobs(sweep_dir)
    if absent:
        text += ("\n## Jobs the sweep launched that its dir lacks\n\n" + "".join(f"- {job}\n" for job in absent)
                 + f"\nRun them with: {sweep_command(sweep_dir)} (the sweep launched again into its dir runs only "
                   "what it lacks).\n")
    return text


def unfinished_reason(job_dir: Path) -> str:
    """Why a job dir holds neither a run summary nor a failure record, as far as its files tell."""
    log = job_dir / "train.log"
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()] \
        if log.is_file() else []
    errors = [line for line in lines if "Error" in line or "error:" in line or "Traceback" in line]
    if errors:
        return f"it stopped on an error gptlab did not record as a failure; its train.log says: {errors[-1][:200]}"
    if lines:
        return f"still running, or killed (no error in its train.log, which ends: {lines[-1][:160]})"
    return "no run summary, failure record or train.log: killed before training, or still starting"


def write_report(sweep_dir: Path, baseline: str | None = None, alpha: float = 0.05, x: str | None = None,
                 band: str = "minmax", test: str = "paired", correction: str = "holm", margin: float | None = None,
                 effect: float | None = None) -> tuple[Path, Path]:
    """Writes ablation_report.md and val_loss.png into the sweep dir."""
    check_options(x, band)
    check_verdict_options(test, correction)
    jobs, repeats = drop_repeats(load_sweep(sweep_dir))
    variants = group_variants(jobs)
    base = pick_baseline(variants, baseline)
    x_axis = x or default_x(variants)
    no_cost = [f"{j.job_dir.name} ({j.cost_error})" for j in jobs if j.cost is None]
    if x_axis == "flops" and no_cost:
        raise ConfigError(f"--x flops needs every job's model from {RESOLVED_CONFIG}; unreadable: "
                          + ", ".join(no_cost) + ". Use --x tokens or --x seconds.")
    judged, found = judge(variants, base, alpha, test, correction, margin)
    comps = [v and v.comparison for v in judged]
    budget, at_budget = matched_flops(variants)
    out = report_dir(sweep_dir)
    table_path, plot_path = out / "ablation_report.md", out / "val_loss.png"
    name = jobs[0].summary.get("name", "sweep")
    text = f"# {name}: {sweep_dir}\n\n"
    keys = [k for k in differing_keys(jobs) if k != SEED_KEY]
    text += (f"{len(jobs)} jobs in {len(variants)} variants (grouped by {', '.join(keys) or 'nothing'}; "
             f"seeds are repeats). Baseline: {base.label}"
             f"{' (--baseline)' if baseline else ' (the first variant; --baseline k=v to choose)'}.\n\n")
    labels = [v.label for v in variants]
    text += tests_paragraph(labels, judged, alpha)
    if budget is not None:
        text += (f"val loss @ matched FLOPs: each variant's mean val/loss curve at {budget:.4g} training FLOPs, "
                 f"the largest every variant reached (training FLOPs = tokens × FLOPs per token, 3 × forward).\n\n")
    else:
        text += "val loss @ matched FLOPs: unavailable (a variant has no val/loss curve or no readable model).\n\n"
    if repeats:
        text += "Warning: repeated runs are not independent seeds.\n" + "".join(f"- {n}\n" for n in repeats) + "\n"
    text += seeds_note(variants, sweep_dir) + stability_note(jobs)
    text += "## Verdicts (final val/loss against the baseline)\n\n"
    text += tokens_note(variants) if len(variants) > 1 else ""
    lines = [verdict(v.label, j.comparison) + "".join(f"; {note}" for note in (
        j.equivalence and j.equivalence.text(), cost_note(v, base)) if note) for v, j in zip(variants, judged) if j]
    text += "".join(f"- {line}\n" for line in lines) or "- only one variant: nothing to compare\n"
    seeds = max((len(v.jobs) for v in variants), default=0)
    text += "\n" + power_section(found, seeds, alpha, effect) + ranking(labels, judged)
    worths = ["" if j is None else (j.worth.text() if j.worth else "—") for j in judged]
    text += "## Variants (mean ± std over seeds)\n\n" + worth_note()
    text += variant_table(variants, comps, at_budget, alpha, base, worths)
    text += jobs_section(jobs, sweep_dir)
    if no_cost:
        text += f"\nParameters and FLOPs unknown for: {', '.join(no_cost)}\n"
    band_text = "min–max over seeds" if band == "minmax" else "±1 std over seeds"
    text += f"\n![val/loss against {X_LABELS[x_axis]}, bands: {band_text}]({plot_path.name})\n"
    text += (f"\nThe same bands in TensorBoard: runs {BANDS_DIR}/<variant> of `tensorboard --logdir {out}` "
             "(Time Series and Scalars open on them: card seeds/val_loss, one line per variant, then one card per "
             "variant with its mean and band edges; Custom Scalars: the margin chart, one shaded band per variant).\n")
    atomic_write_text(table_path, text)
    plot_val_loss(variants, x_axis, band, name, plot_path, budget if x_axis == "flops" else None)
    write_seed_bands(out, variants, band)
    return table_path, plot_path
