"""hydra/launcher=fused: a sweep's members trained as one vmapped step are each exactly their own run (issue 42)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional

import hydra
import pytest
import torch
from helpers import TESTS, TINY, compose_config, load_checkpoint, run_train, scalar_steps, scalars
from omegaconf import DictConfig, OmegaConf, open_dict

import gptlab
from gptlab.apps.train import train
from gptlab.config.schemas import Stages
from gptlab.errors import ConfigError
from gptlab.execution.fused import MEMBER_MODEL_FIELDS, _Request, step_signature
from gptlab.launch.fused_groups import (
    STACKED_BYTES_PER_PARAM,
    check_group_memory,
    describe,
    group_bytes,
    plan_groups,
)
from gptlab.model import GPT, GPTConfig
from gptlab.preflight.batch_fit import MEMORY_MARGIN
from gptlab.preflight.early_checks import build_model_config
from gptlab.preflight.planning import PROCESS_OVERHEAD_BYTES, estimate_memory
from gptlab.report.runs import write_report
from gptlab.runs.run_dir import FAILURE_FILE, SUMMARY_FILE
from gptlab.runs.run_dir_lock import lock_run_dir, release
from gptlab.train.stages import StagePlan

FUSED = "hydra/launcher=fused"
QUIET = ["callbacks.text_samples=null", "callbacks.stability_probes=null"]
MEMBERS = f"hydra.searchpath=[file://{TESTS / 'fixtures' / 'fused_conf'}]"  # fused_member/a.yaml, b.yaml, ...
# Two groups (tests/fixtures/fused_conf/fused_member). Group 1, 4 members of one shape, 8 steps: jobs 0 and 1 differ
# in every own value (AdamW and Muon, 1 and 2 micro-batches a step, seed, dropout, z-loss, init scale, label
# smoothing, weight decay, schedule) and are compared with their runs alone; job 2 diverges at step 2 and job 3 is
# refused for its own value. Group 2, jobs 4 and 5: local attention and RoPE, one on a data mixture, 200 steps. The
# fused sweep is preempted once (SIGTERM as job 0's step 3 begins: group 2 has not started) and launched again:
# 0 and 1 continue, 2 and 3 are skipped, group 2 runs.
PER_MEMBER = ("trainer.log_every_n_steps=1",)  # set by each member file: group 2 logs every 10th of its 200 steps
SWEEP = [*(o for o in TINY if o not in PER_MEMBER), *QUIET, MEMBERS, "+fused_member=a,b,c,d,e,f",
         "optimizer.lr=3e-3", "+callbacks.kill._target_=helpers.KillSweepJobOnce",
         "+callbacks.kill.job=0", "+callbacks.kill.step=3", "+callbacks.kill.signal_name=SIGTERM"]
JOBS, FAILING, OTHER_SHAPE = ("0", "1"), ("2", "3"), ("4", "5")
SOME_FAILED = 1  # a sweep's exit code when some of its jobs failed (runs/sweep_failures.py)


def _sweep(root: Path, name: str, *extra: str, returncode: int = SOME_FAILED) -> tuple[Path, str]:
    """The sweep launched (again) into `root / name`, each job to its own trainer.max_steps unless `extra` says."""
    proc = run_train(["-m", *SWEEP, *extra, f"+callbacks.kill.marker={root / 'signal'}",
                      f"hydra.sweep.dir={root / name}"], cwd=root, threads=1)
    assert proc.returncode == returncode, proc.stderr[-3000:]
    return root / name, proc


@pytest.fixture(scope="module")
def preempted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, int]]:
    """The fused sweep stopped by one SIGTERM (exit 143), each member's saved step, then launched again to its
    end (the failed members' files untouched by the relaunch, which skips them)."""
    root = tmp_path_factory.mktemp("fused")
    fused, proc = _sweep(root, "fused", FUSED, returncode=143)
    saved = {job: load_checkpoint(fused / job / "checkpoints" / "last.ckpt")["global_step"] for job in JOBS}
    failed = _files(fused, FAILING)
    relaunch = _sweep(root, "fused", FUSED)[1]
    assert _files(fused, FAILING) == failed
    assert "group 2: 2 members, jobs #4,#5" in relaunch.stdout  # local attention and RoPE: a group of their own
    return fused, proc.stderr, saved


def _files(sweep: Path, jobs: tuple[str, ...]) -> dict[Path, int]:
    """The jobs' files and their times (but Hydra's own .hydra/ and the log, rewritten by every launch)."""
    return {p: p.stat().st_mtime_ns for job in jobs for p in (sweep / job).rglob("*")
            if p.is_file() and p.suffix != ".log" and ".hydra" not in p.parts}


@pytest.fixture(scope="module")
def sweeps(preempted, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The preempted and relaunched fused sweep, and the same sweep run alone (the signal's marker exists by then:
    no signal)."""
    fused = preempted[0]
    return fused, _sweep(fused.parent, "alone")[0]


def test_one_signal_saves_every_member_at_its_own_step(preempted) -> None:
    _, stderr, saved = preempted
    assert stderr.count("gptlab: preempted (SIGTERM at step") == len(JOBS), stderr[-3000:]
    assert "Traceback" not in stderr
    assert all(0 < step < 8 for step in saved.values()), saved
    assert len(set(saved.values())) > 1, saved  # members with 1 and 2 micro-batches a step stop at their own steps


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-5 * abs(b)


def test_each_member_logs_what_its_run_alone_logs(sweeps) -> None:
    fused, alone = sweeps
    for job in JOBS:
        got, want = scalars(fused / job), scalars(alone / job)
        assert sorted(got) == sorted(want)
        for tag in ("train/loss", "val/loss", "train/lr", "train/grad_norm"):
            assert sorted(got[tag]) == sorted(want[tag]), (job, tag)
            bad = {s: (got[tag][s], v) for s, v in want[tag].items() if not _close(got[tag][s], v)}
            assert not bad, (job, tag, bad)
        assert max(want["val/loss"]) == 8 and max(want["train/loss"]) == 8


def test_members_with_local_attention_rope_and_a_mixture_log_what_their_runs_alone_log_over_200_steps(sweeps) -> None:
    """Group 2 (e.yaml, f.yaml): banded attention and rotary positions in the fused forward, and a member whose
    batches come from a data mixture (its per-source val/loss too), at every logged step of 200 (each 10th)."""
    fused, alone = sweeps
    for job in OTHER_SHAPE:
        got, want = scalars(fused / job), scalars(alone / job)
        assert sorted(got) == sorted(want)
        assert sorted(want["train/loss"]) == list(range(10, 201, 10))
        assert sorted(want["val/loss"]) == [50, 100, 150, 200]
        for tag in (t for t in want if t == "train/loss" or t.startswith("val/loss")):
            assert sorted(got[tag]) == sorted(want[tag]), (job, tag)
            bad = {s: (got[tag][s], v) for s, v in want[tag].items() if not _close(got[tag][s], v)}
            assert not bad, (job, tag, bad)
    assert {"val/loss/pydocs", "val/loss/python_stdlib"} <= set(scalars(fused / "4"))  # e.yaml read the mixture


def test_each_member_writes_its_own_run_dir_and_checkpoint(sweeps) -> None:
    fused, alone = sweeps
    for job in JOBS:
        ours, theirs = fused / job, alone / job
        config = (ours / "config_resolved.yaml").read_text().replace(str(fused), "<sweep>")
        assert config == (theirs / "config_resolved.yaml").read_text().replace(str(alone), "<sweep>")
        summary = json.loads((ours / SUMMARY_FILE).read_text())
        assert summary["global_step"] == 8 and _close(summary["best_val_loss"],
                                                       json.loads((theirs / SUMMARY_FILE).read_text())["best_val_loss"])
        got, want = (load_checkpoint(d / "checkpoints" / "last.ckpt") for d in (ours, theirs))
        assert got["global_step"] == want["global_step"] == 8
        for key, value in want["state_dict"].items():
            torch.testing.assert_close(got["state_dict"][key], value, rtol=1e-5, atol=1e-6)
    model, _ = gptlab.load(fused / "0")  # what eval.py and sample.py read
    assert model.num_parameters() > 0


def _without_measured_speed(report: str) -> str:
    """The report with its tokens/s cells blanked: a member's own wall clock includes its wait for the others."""
    lines, column = [], None
    for line in report.splitlines():
        cells = line.split(" | ")
        if "tokens/s" in cells:
            column = cells.index("tokens/s")
        elif not line.startswith("|"):
            column = None
        elif column is not None and len(cells) > column:
            cells[column] = "-"
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def test_the_report_of_a_fused_sweep_is_the_report_of_the_sweep_alone(sweeps) -> None:
    """Same table, same verdicts: every number but the measured speed."""
    tables = [_without_measured_speed(write_report(sweep)[0].read_text().replace(str(sweep), "<sweep>"))
              for sweep in sweeps]
    assert "Welch" in tables[0] and tables[0] == tables[1]


def test_a_failing_member_is_recorded_while_the_others_finish_and_a_relaunch_skips_it(sweeps) -> None:
    """Job 2 diverged and job 3 was refused, in the group as alone (the relaunch skipped both: `preempted`)."""
    for sweep in sweeps:
        diverged = json.loads((sweep / "2" / FAILURE_FILE).read_text())
        refused = json.loads((sweep / "3" / FAILURE_FILE).read_text())
        assert diverged["kind"] == "diverged" and "train/loss is nan at step 2" in diverged["reason"]
        assert refused["kind"] == "config error" and "model.z_loss=-1.0" in refused["reason"]
        assert not (sweep / "2" / SUMMARY_FILE).exists()


def test_a_second_sweep_into_a_sweep_dir_in_use_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """Two fused sweeps never write into one member's dir: a sweep holds its sweep dir (and so every job dir in it)
    for its whole run (launch/run_dir_guard.py), fused or not."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    held = lock_run_dir(sweep, field="hydra.sweep.dir")  # a running sweep's hold on it
    try:
        proc = run_train(["-m", FUSED, *SWEEP, "+callbacks.kill.marker=x", f"hydra.sweep.dir={sweep}"], cwd=tmp_path,
                         threads=1)
    finally:
        release(held)
    assert proc.returncode == 2 and "is in use by another run" in proc.stderr, proc.stderr[-3000:]
    assert [p.name for p in sweep.iterdir()] == []


def _job(n: int, *overrides: str):
    cfg = compose_config([*TINY, *overrides])
    with open_dict(cfg):
        cfg.hydra = {"job": {"num": n, "override_dirname": ",".join(overrides)}, "overrides": {"task": list(overrides)}}
    return cfg


def test_jobs_group_by_shape_up_to_max_members_and_say_why_they_split() -> None:
    jobs = [_job(0, "seed=1"), _job(1, "model.norm=post"), _job(2, "seed=2", "optimizer.lr=1e-3"),
            _job(3, "seed=3", "model.z_loss=1e-4", "model.dropout=0.1", "model.init_scale=0.5",
                 "optimizer.weight_decay=0", "scheduler.warmup_steps=3")]
    groups, differ = plan_groups(jobs, max_members=2)
    assert groups == [[0, 2], [3], [1]] and differ == ["model.norm"]
    assert "split by model.norm (members of a group share them)" in describe(groups, differ, jobs, 2)[0]


def test_a_group_that_does_not_fit_is_refused_naming_the_group_size_that_does() -> None:
    """The group's bytes are k times one member's as train's own memory check counts them (one estimate), plus the
    stacked copy; the size it names fits with the single-run refusal's margin, so it passes the same check typed
    even when the free memory has shrunk by that margin meanwhile."""
    job = _job(0, "data.batch_size=8")
    group, member = group_bytes(job, 8)
    model = GPTConfig.for_tokenizer(OmegaConf.to_container(job.model, resolve=True), 257)
    alone = estimate_memory(model, 8, job.trainer, "cpu")
    assert member == alone.per_process - PROCESS_OVERHEAD_BYTES + STACKED_BYTES_PER_PARAM * alone.parameters
    assert group == PROCESS_OVERHEAD_BYTES + 8 * member
    free = group_bytes(job, 3)[0] / (1 - MEMORY_MARGIN) + member / 2  # 3 members fit with the margin spare
    no_margin = int((free - PROCESS_OVERHEAD_BYTES) // member)  # what fits with nothing to spare
    with pytest.raises(ConfigError, match=r"set hydra.launcher.max_members=(\d+) ") as refused:
        check_group_memory([job] * (no_margin + 1), free=free)
    named = int(re.search(r"max_members=(\d+) ", str(refused.value)).group(1))
    assert group_bytes(job, named)[0] <= free * (1 - MEMORY_MARGIN) < group_bytes(job, named + 1)[0]
    assert named < no_margin, "a size that only just fits is refused again once free memory moves"
    assert f"leaving {MEMORY_MARGIN:.0%} of the free RAM spare" in str(refused.value)
    assert "\n" not in str(refused.value) and "or run the sweep without hydra/launcher=fused" in str(refused.value)
    check_group_memory([job] * named, free=free * (1 - MEMORY_MARGIN))  # typed: passes with the margin gone
    with pytest.raises(ConfigError, match="not even one member fits"):
        check_group_memory([job] * 2, free=member / 2)
    with open_dict(job):
        job.check_memory = False
    check_group_memory([job] * 8, free=0.0)  # as a run's own check, check_memory=false skips it


@pytest.mark.parametrize("override,says", [
    ("trainer=ddp", "use trainer=default"), ("trainer=fsdp", "use trainer=default"),
    ("trainer.devices=2", "set trainer.devices=1"), ("trainer.num_nodes=2", "set trainer.num_nodes=1"),
    ("runtime.activation_checkpointing=true", "set runtime.activation_checkpointing=false"),
    ("runtime.float8=true", "set runtime.float8=false"), ("runtime.compile=true", "set runtime.compile=false"),
    ("budget=seconds:60", "give a tokens or flops budget")])
def test_what_cannot_fuse_is_one_line_naming_the_key(override: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        plan_groups([_job(0, override)], max_members=8)
    assert "or run the sweep without hydra/launcher=fused" in str(refused.value)
    assert "\n" not in str(refused.value)


MORE = 12  # steps of the continuations: 4 past the end of group 1's jobs (group 2's, at 200, are finished)


@pytest.fixture(scope="module")
def continued(sweeps) -> tuple[Path, Path, Path]:
    """Job 0 continued past its end three ways: its fused member's checkpoint resumed alone (`resume=auto` in the
    member's own dir, with the job's overrides, as train.py runs it), the fused sweep launched again with more steps
    (in its group), and the job of the sweep alone resumed as the first (never fused). The member's dir is set aside
    while it is resumed alone and put back for its group. The shared sweeps end at step MORE: the tests that read
    them at step 8 come before this one in the file."""
    fused, alone = sweeps
    member, kept, solo = fused / "0", fused.parent / "kept", fused.parent / "solo"
    shutil.copytree(member, kept)
    overrides = [str(o) for o in OmegaConf.load(member / ".hydra" / "overrides.yaml")]
    with pytest.MonkeyPatch.context() as patch:  # in this process: a launch costs ~10 s of Hydra and setup here
        patch.chdir(fused.parent)  # the sweeps' launch dir, where the data's cache_dir is
        train(compose_config([MEMBERS, *overrides, "resume=auto", f"trainer.max_steps={MORE}"], member))
        train(compose_config([MEMBERS, *overrides, "resume=auto", f"trainer.max_steps={MORE}"], alone / "0"))
    member.rename(solo)
    kept.rename(member)
    _sweep(fused.parent, "fused", FUSED, f"trainer.max_steps={MORE}")
    return solo, fused / "0", alone / "0"


def test_a_member_continued_alone_in_its_group_and_never_fused_logs_the_same_next_steps(continued) -> None:
    """Job 0 was preempted before step 8 (its step-4 validation cut, run again on its relaunch): each continuation
    logs every val/loss once, step 8's not again."""
    want = scalars(continued[2])
    assert sorted(want["train/loss"]) == list(range(1, MORE + 1)) and sorted(want["val/loss"]) == [4, 8, 12]
    for way, run_dir in zip(("resumed alone", "in its group"), continued):
        got = scalars(run_dir)
        for tag in ("train/loss", "val/loss"):
            assert sorted(got[tag]) == sorted(want[tag]), (way, tag)
            bad = {s: (got[tag][s], v) for s, v in want[tag].items() if not _close(got[tag][s], v)}
            assert not bad, (way, tag, bad)
    for run_dir in continued:
        assert scalar_steps(run_dir, "val/loss") == [4, 8, 12], run_dir


# --- Every config key (issue 54): a two-member sweep differing in that key alone is split, refused, or fused; fused
# only where each member's every step is the same computation as the other's (the trajectory below, built from the
# model and the run's schedules as the run builds them) and what differs reaches no fused step but through values
# a real fused sweep here showed to be each member's own (VERIFIED_KEYS).

SCHEDULED = ["model.attn_pattern=[local]", "model.attn_window=16", "stages.windows=[8,16]", "model.untie_at=0.5",
             "trainer.max_steps=4"]  # a base whose steps change code: a stage's window, then the untied head
CASES = f"hydra.searchpath=[file://{TESTS / 'fixtures' / 'fused_conf'}]"  # fused_case/*.yaml: issue 54's cases
# fused_case/*.yaml in the groups the launcher must make of them (a group of one: split from every other case)
CASE_GROUPS = [["w8a", "w8b"], ["w32"], ["s8"], ["s16"], ["u4"], ["u8a", "u8b"], ["mtpa", "mtpb"]]


def _leaves(values: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _other(value: Any) -> Any:
    """Another value of the key's kind (the grouping compares values; whether a run accepts it is its own check)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 if value != -1 else 7
    if isinstance(value, float):
        return value * 2 + 0.5
    if isinstance(value, str):
        return "other" if value.startswith("${") else value + "_other"
    if isinstance(value, list):
        return [*value, value[0]] if value else [2]
    return 2  # None or an empty node


def _job_pair(plain: dict) -> list[DictConfig]:
    """Two jobs of the config `plain`, untyped (any value of any key, as a sweep can type one)."""
    jobs = [OmegaConf.create(plain) for _ in range(2)]
    for n, cfg in enumerate(jobs):
        with open_dict(cfg):
            cfg.hydra = {"job": {"num": n, "override_dirname": f"job{n}"}, "overrides": {"task": [f"job{n}"]}}
    return jobs


_TRAJECTORIES: dict[str, Optional[list]] = {}


def _trajectory(cfg: DictConfig, micro_batches: int = 24) -> Optional[list]:
    """What the fused step would get from this job at each of its first micro-batches: the step signature of its
    model (execution/fused.py, as a round compares members) at that step's window and untying, with that step's
    batch (stages.*, data.document_masking) and precision. None: the job's own run refuses it (it never steps)."""
    try:
        names = ("model", "tokenizer", "stages", "data.batch_size", "data.block_size", "data.document_masking",
                 "trainer.max_steps", "trainer.accumulate_grad_batches", "trainer.precision", "global_batch_tokens")
        inputs = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                  for k, v in ((k, OmegaConf.select(cfg, k)) for k in names)}
    except Exception:
        return None
    key = json.dumps(inputs, sort_keys=True, default=str)
    if key not in _TRAJECTORIES:
        _TRAJECTORIES[key] = _steps(inputs, micro_batches)
    return _TRAJECTORIES[key]


def _steps(inputs: dict, micro_batches: int) -> Optional[list]:
    try:
        model_cfg = build_model_config(inputs["model"], hydra.utils.instantiate(inputs["tokenizer"]).vocab_size)
        if model_cfg.n_layer > 4 or model_cfg.n_embd > 256:
            return None  # a preset, not the tiny model: a model size, which splits anyway
        model = GPT(model_cfg)
        batch, block, steps = int(inputs["data.batch_size"]), int(inputs["data.block_size"]), int(
            inputs["trainer.max_steps"])
        total = steps if steps > 0 else 240
        tokens = inputs["global_batch_tokens"]
        accumulate = int(tokens) // (batch * block) if tokens else int(inputs["trainer.accumulate_grad_batches"])
        plan = StagePlan(Stages(**inputs["stages"]), total, model_cfg.untie_at)
    except Exception:
        return None
    out = []
    for n in range(micro_batches):
        step = n // max(1, accumulate)
        if plan.untie_step is not None and step >= plan.untie_step and model.head_tied:
            model.untie_head()
        if plan.window(step) is not None:
            model.use_window(plan.window(step))
        x = plan.batch((torch.zeros(batch, block, dtype=torch.long),), step)[0]
        signature = step_signature(_Request(model, x, x, x if inputs["data.document_masking"] else None, 0.0, 0.0))
        out.append((signature, str(inputs["trainer.precision"])))
    return out


def _reaches_fused_step(jobs: list[DictConfig]) -> bool:
    """Whether the members hand the fused step other per-member values (loss terms, dropout, init, seed: the
    values a real fused sweep must show to be each member's own)."""
    def own(cfg: DictConfig) -> tuple:
        return (cfg.get("label_smoothing"), cfg.get("seed"), *(OmegaConf.select(cfg, f"model.{f}")
                                                              for f in MEMBER_MODEL_FIELDS))
    return own(jobs[0]) != own(jobs[1])


def _verified_keys() -> set[str]:
    """The keys in which members of one group of this file's real fused sweeps differ (each compared with its run
    alone): fused_member/a..d, e..f and fused_case/*, read from their files (a config group a file overrides: every
    key under it)."""
    keys: set[str] = set()
    for folder, groups in (("fused_member", [["a", "b", "c", "d"], ["e", "f"]]), ("fused_case", CASE_GROUPS)):
        for members in groups:
            flats = []
            for member in members:
                values = OmegaConf.to_container(OmegaConf.load(TESTS / "fixtures" / "fused_conf" / folder /
                                                               f"{member}.yaml"))
                overrides = [d for d in values.pop("defaults", []) if isinstance(d, dict)]
                flats.append({**dict(_leaves(values)), **{f"{next(iter(d)).split('/')[-1]}.": next(iter(d.values()))
                                                         for d in overrides}})
            keys |= {k for f in flats for k in f if any(g.get(k) != f[k] for g in flats)}
    return keys


def _verified(key: str, verified: set[str]) -> bool:
    return key in verified or any(v.endswith(".") and key.startswith(v) for v in verified)


def _decide(key: str, jobs: list[DictConfig], verified: set[str]) -> str:
    """refused, split or fused, for two jobs that differ in `key`; fused only where that is shown exact."""
    try:
        groups, differ = plan_groups(jobs, max_members=8)
    except ConfigError as err:
        assert key in str(err) and "\n" not in str(err), (key, str(err))
        return "refused"
    if groups == [[0], [1]]:
        assert key in differ, (key, differ)  # the launcher's line names it
        return "split"
    assert groups == [[0, 1]], (key, groups)
    trajectories = [_trajectory(job) for job in jobs]
    if None not in trajectories:
        common = min(map(len, trajectories))
        assert trajectories[0][:common] == trajectories[1][:common], f"{key} changes a fused step but is fused"
    if _reaches_fused_step(jobs):
        assert _verified(key, verified), f"{key} reaches the fused step: show it in a real fused sweep (fused_case/)"
    return "fused"


@pytest.mark.parametrize("base", [[], SCHEDULED], ids=["plain", "scheduled"])
def test_every_key_differing_between_two_members_is_split_refused_or_shown_their_own(base: list[str]) -> None:
    plain = OmegaConf.to_container(compose_config([*TINY, *base]), resolve=False)
    plain.pop("hydra", None)
    leaves = dict(_leaves(plain))
    keys = list(leaves)
    assert len(keys) > 150 and "stages.windows" in keys and "model.untie_at" in keys  # the whole config walked
    verified, decided = _verified_keys(), {}
    jobs = _job_pair(plain)
    for key in keys:
        value = leaves[key]
        OmegaConf.update(jobs[1], key, _other(value), merge=False)
        try:
            decided[key] = _decide(key, jobs, verified)
        finally:
            OmegaConf.update(jobs[1], key, value, merge=False)
    # the cases split; a member's own values fuse
    for key in ("stages.windows", "stages.seq_lens", "model.untie_at", "data.document_masking", "model.attn_pattern",
                "trainer.precision", "model.n_layer", "data.batch_size", "runtime.attention_backend"):
        assert decided[key] == "split", (key, decided[key])
    for key in ("seed", "optimizer.lr", "model.dropout", "model.mtp_weights", "scheduler.warmup_steps"):
        assert decided[key] == "fused", (key, decided[key])
    assert decided["trainer.max_steps"] == ("split" if base else "fused")  # stages are fractions of max_steps


CASE_SWEEP = [*(o for o in TINY if o not in PER_MEMBER), "trainer.log_every_n_steps=1", *QUIET, CASES,
              "trainer.val_check_interval=4", "+fused_case=" + ",".join(c for g in CASE_GROUPS for c in g)]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """Issue 54's cases (fused_case/*.yaml) as one fused sweep and as the same sweep alone."""
    root = tmp_path_factory.mktemp("cases")
    out = {}
    for name, extra in (("fused", [FUSED]), ("alone", [])):
        proc = run_train(["-m", *CASE_SWEEP, *extra, f"hydra.sweep.dir={root / name}"], cwd=root, threads=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = proc.stdout
    return root / "fused", root / "alone", out["fused"]


def test_members_of_other_stages_untying_or_sequence_lengths_are_split_and_each_is_its_run_alone(cases) -> None:
    """stages.windows=[8] and [32], stages.seq_lens=[8] and [16], model.untie_at with 4 and 8 steps: each a group
    of its own (two seeds of one shape, untying or at a stage window, and multi-token prediction in one member
    only, share one), and every member logs what its run alone logs."""
    fused, alone, stdout = cases
    jobs = [c for g in CASE_GROUPS for c in g]
    for n, group in enumerate(CASE_GROUPS, start=1):
        ids = ",".join(f"#{jobs.index(c)}" for c in group)
        assert f"group {n}: {len(group)} members, jobs {ids}:" in stdout, stdout[:3000]
    for job in map(str, range(len(jobs))):
        got, want = scalars(fused / job), scalars(alone / job)
        for tag in ("train/loss", "val/loss"):
            assert sorted(got[tag]) == sorted(want[tag]), (jobs[int(job)], tag)
            bad = {s: (got[tag][s], v) for s, v in want[tag].items() if not _close(got[tag][s], v)}
            assert not bad, (jobs[int(job)], tag, bad)


def test_a_fused_members_seconds_are_its_share_of_its_groups_time(cases) -> None:
    """fit_seconds counts the member's own turns and its share of each fused round: its group's members add up to
    at most the group's time the launcher prints (each member's wall clock would add up to k times its fit)."""
    fused, _, stdout = cases
    jobs = [c for g in CASE_GROUPS for c in g]
    walls = [float(w) for w in re.findall(r"gptlab: fused: group \d+ ran in ([\d.]+) s", stdout)]
    assert len(walls) == len(CASE_GROUPS)
    for group, wall in zip(CASE_GROUPS, walls):
        summaries = [json.loads((fused / str(jobs.index(c)) / SUMMARY_FILE).read_text()) for c in group]
        assert sum(s["fit_seconds"] for s in summaries) <= wall + 0.1, (group, summaries, wall)  # printed to 0.1 s
        assert all(s["tokens_per_sec"] > 0 for s in summaries)


@pytest.mark.parametrize("overrides,says", [
    (["hydra/launcher=fused", "seed=1", "hydra/launcher=submitit_slurm"],
     "hydra/launcher is chosen twice on the command line (hydra/launcher=fused, then hydra/launcher=submitit_slurm)"),
    (["optimizer=adamw", "seed=1", "optimizer=muon"], "optimizer is chosen twice on the command line"),
])
def test_a_group_chosen_twice_is_one_line_naming_both(overrides: list[str], says: str) -> None:
    """Hydra keeps the last choice of a group silently: `hydra/launcher=fused ... hydra/launcher=submitit_slurm`
    ran under SLURM's launcher and failed with its traceback (issue 54). A value given twice is not a group."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from gptlab.launch.hydra_callbacks import CheckSweep, check_one_choice_per_group

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=overrides, return_hydra_config=True)
            with pytest.raises(ConfigError, match=re.escape(says)) as refused:
                CheckSweep.check(cfg)
            assert "\n" not in str(refused.value) and "give" in str(refused.value)
            check_one_choice_per_group(compose("train", overrides=["seed=1", "seed=2", "optimizer=muon"],
                                               return_hydra_config=True))
    finally:
        GlobalHydra.instance().clear()
