"""A report holds every job its sweep ran, whatever on the command line replaced an experiment's list, and sets aside
only runs from elsewhere. Each sweep dir here is recorded by the launch's own code (sweep_identity) from the master
config Hydra composes for the command, and its jobs are the ones Hydra's BasicSweeper makes of that command: the
report's membership rule is checked against Hydra's, not against a copy of itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CONF_DIR, TINY, run_script, run_train
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.initialize import initialize_config_dir
from hydra.types import RunMode
from omegaconf import OmegaConf
from test_report_stats import make_job

from gptlab.model.positions import POSITIONS
from gptlab.report.membership import screen
from gptlab.report.sweep import write_sweep_report
from gptlab.runs.sweep_identity import check_or_record_sweep


def launch(sweep: Path, *command: str) -> list[dict[str, str]]:
    """Records `python src/train.py -m <command> hydra.sweep.dir=<sweep>` as its launch does, and returns the
    overrides of the jobs Hydra's sweeper runs for it, in its order."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = GlobalHydra.instance().hydra.compose_config(
                "train", [*command, f"hydra.sweep.dir={sweep}"], run_mode=RunMode.MULTIRUN)
    finally:
        GlobalHydra.instance().clear()
    check_or_record_sweep(cfg)
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
    lines = [f"{k}={v}" for k, v in params.items()] + list(cfg.hydra.overrides.task)
    batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)
    return [dict(item.split("=", 1) for item in job) for batch in batches for job in batch]


def run_jobs(sweep: Path, jobs: list[dict[str, str]], name: str, start: int = 0) -> None:
    """Finished jobs with those overrides; final val/loss differs by job so variants and seeds are told apart."""
    for index, overrides in enumerate(jobs, start=start):
        final = 3.0 + 0.1 * index
        make_job(sweep, index, overrides, [final + 0.5, final], extra={"name": name})


WIDE = "model.attn_pattern=[dense],[dense,local],[local],[local,dense]"  # ablate_attention has the first 3
CASES = {
    "a command line that widens the experiment's list": (
        "ablate_attention", ("experiment=ablate_attention", WIDE, "seed=1,2"), 8),
    "a command line that narrows it": (
        "ablate_pos_emb", ("experiment=ablate_pos_emb", "model.pos_emb=learned,rope", "seed=1,2"), 4),
    "another key swept on the command line beside the experiment's list": (
        "ablate_norm", ("experiment=ablate_norm", "model.norm_type=layernorm,rmsnorm"), 4),
    "one value on the command line in place of the list, a value outside it": (
        "ablate_attention", ("experiment=ablate_attention", "model.attn_pattern=[local,dense]", "seed=1,2,3"), 3),
    "another key swept by the sweeper from the command line": (
        "ablate_tie", ("experiment=ablate_tie", "+hydra.sweeper.params.seed='1,2'"), 4),
    "hydra.sweeper.params replaced on the command line": (
        "ablate_pos_emb", ("experiment=ablate_pos_emb", "hydra.sweeper.params={model.pos_emb:'rope,alibi'}",
                           "seed=1,2"), 4),
}


@pytest.mark.parametrize("case", CASES)
def test_the_report_holds_every_job_the_sweep_ran(tmp_path: Path, case: str) -> None:
    name, command, count = CASES[case]
    sweep = tmp_path / "sweep"
    jobs = launch(sweep, *command)
    assert len(jobs) == count  # Hydra's own count: the test's premise
    run_jobs(sweep, jobs, name)
    screened = screen(sweep)
    assert screened.left_out == [] and len(screened.members) == count
    text = write_sweep_report(sweep)[0].read_text()
    assert f"{count} jobs in " in text and "left out" not in text


def test_a_run_from_elsewhere_is_still_set_aside(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    jobs = launch(sweep, "experiment=ablate_attention", WIDE, "seed=1,2")
    run_jobs(sweep, jobs, "ablate_attention")
    key = "model.attn_pattern"
    elsewhere = [{**jobs[0], key: "[local,local,dense]"}, {**jobs[0], "model.n_layer": "2"}, {**jobs[0], "seed": "3"},
                 {k: v for k, v in jobs[0].items() if k != "seed"}]
    run_jobs(sweep, elsewhere, "ablate_attention", start=10)
    make_job(sweep, 14, jobs[1], [3.5, 3.2], extra={"name": "another_sweep"})
    assert dict(screen(sweep).left_out) == {
        "10": f"{key}=[local,local,dense] is not one of this sweep's values ([dense], [dense,local], [local], "
              "[local,dense]): a run from elsewhere",
        "11": "its overrides set model.n_layer, which this sweep's launch did not: a run from elsewhere",
        "12": "seed=3 is not one of this sweep's values (1, 2): a run from elsewhere",
        "13": "its overrides have no seed, which every job of this sweep sets: a run from elsewhere",
        "14": "its run name 'another_sweep' is not this sweep's 'ablate_attention': a run from elsewhere",
    }
    assert len(screen(sweep).members) == 8


def test_the_lr_report_holds_every_lr_the_command_line_swept(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    jobs = launch(sweep, "experiment=gallery_qk_norm", "optimizer.lr=3e-3,3e-2,3e-1,1")  # widened from 3 LRs
    assert len(jobs) == 16
    run_jobs(sweep, jobs, "gallery_qk_norm")
    text = write_sweep_report(sweep)[0].read_text()
    assert "16 jobs: 2 variants × 4 learning rates" in text and "left out" not in text


def test_the_ladder_keeps_its_plus_keys_and_a_narrowed_ladder(tmp_path: Path) -> None:
    """The ladder's keys are config groups added with `+` (`+rung=gpt2`): its jobs spell them so too."""
    sweep = tmp_path / "sweep"
    jobs = launch(sweep, "experiment=ladder_gpt2_to_llama", "+ladder=w16,w24", "seed=1,2")
    assert len(jobs) == 8 and all("+rung" in job for job in jobs)
    run_jobs(sweep, jobs, "ladder_gpt2_to_llama")
    assert screen(sweep).left_out == [] and len(screen(sweep).members) == 8


def test_a_sweep_recorded_before_the_command_line_was_kept_still_takes_its_command_lines_values(
        tmp_path: Path) -> None:
    """Such a sweep_config.json has the command line's swept overrides only: they replace the experiment's list."""
    sweep = tmp_path / "sweep"
    jobs = launch(sweep, "experiment=ablate_attention", WIDE, "seed=1,2")
    record = json.loads((sweep / "sweep_config.json").read_text())
    del record["task_overrides"]
    (sweep / "sweep_config.json").write_text(json.dumps(record))
    run_jobs(sweep, jobs, "ablate_attention")
    run_jobs(sweep, [{**jobs[0], "model.attn_pattern": "[local,local,dense]"}], "ablate_attention", start=10)
    assert [name for name, _ in screen(sweep).left_out] == ["10"] and len(screen(sweep).members) == 8


def test_the_ready_positional_ablation_covers_every_position_scheme(tmp_path: Path) -> None:
    jobs = launch(tmp_path / "sweep", "experiment=ablate_pos_emb")
    assert sorted(job["model.pos_emb"] for job in jobs) == sorted(POSITIONS)


def test_a_real_sweep_whose_command_line_replaces_an_experiments_list_reports_every_job(tmp_path: Path) -> None:
    """The issue's case, trained: a command-line list with a value the experiment does not have (as rope and alibi
    were for ablate_pos_emb) keeps that value's job."""
    sweep = tmp_path / "sweep"
    args = ["-m", "experiment=ablate_attention", "model.attn_pattern=[dense],[local,dense]", *TINY,
            "trainer.max_steps=2", "trainer.val_check_interval=1", "callbacks.text_samples=null",
            "callbacks.stability_probes=null", f"hydra.sweep.dir={sweep}"]
    proc = run_train(args, cwd=tmp_path, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = run_script("scripts/ablation_report.py", [str(sweep)], check=True).stdout
    assert "2 jobs in 2 variants (grouped by model.attn_pattern" in out and "left out" not in out
    assert "- model.attn_pattern=[local,dense]: " in out


def test_a_damaged_sweep_record_is_said_not_ignored(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A sweep_config.json cut or edited into bad JSON was ignored without a word (the report ran on the majority
    rule); it is now named on stderr with what the report does instead."""
    from gptlab.report.membership import launched

    (tmp_path / "sweep_config.json").write_text("{not json")
    assert launched(tmp_path) is None
    err = capsys.readouterr().err
    assert err.startswith(f"gptlab: warning: {tmp_path / 'sweep_config.json'} is unreadable (JSONDecodeError") and \
        err.count("\n") == 1, err
    assert launched(tmp_path / "no_record") is None and capsys.readouterr().err == ""  # an old sweep: nothing to say
