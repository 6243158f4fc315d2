"""Hydra's own ways of reading a config work on gptlab's entry points (issue 46 item 4): `--cfg job --resolve` (was
"paths.output_dir=None is invalid": Hydra runs no job, so hydra.runtime.output_dir is unset), `--cfg hydra`,
`--info`, and `-m --cfg job`, which Hydra itself refuses ("Only one of --run, --multirun, --cfg ...") and gptlab shows
job by job. Each script's main runs in this process, as `python <script> <flags>` runs it."""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
from pathlib import Path
from unittest import mock

import pytest
from helpers import ROOT
from hydra.core.global_hydra import GlobalHydra

ENTRY_POINTS = ["src/train.py", "src/eval.py", "src/sample.py", "scripts/prepare_data.py", "scripts/export_hf.py",
                "scripts/plan.py", "scripts/count_params.py", "scripts/bench_generate.py"]
HABITS = {
    "--cfg job --resolve": "",  # the config, resolved: its text differs by entry point
    "--cfg hydra": "run:",
    "--info": "Config search path",
    "-m --cfg job": "# job 1: ",
}
# a key of each script's config, two values
SWEPT = {"scripts/export_hf.py": "overwrite=false,true", "scripts/count_params.py": "model=nano,gpt2_small"}


def shown(script: str, args: list[str], cwd: Path) -> str:
    """stdout of `python <script> <args>`; it must neither fail nor show a traceback."""
    out, err = io.StringIO(), io.StringIO()
    GlobalHydra.instance().clear()
    with mock.patch.object(sys, "argv", [script, *args]), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err), contextlib.chdir(cwd):
        try:
            runpy.run_path(str(ROOT / script), run_name="__main__")  # finds ../conf beside the script, as python does
        except SystemExit as stop:
            assert stop.code in (None, 0), err.getvalue()[-2000:]
    assert "Traceback" not in err.getvalue() and "error" not in err.getvalue(), err.getvalue()[-2000:]
    return out.getvalue()


@pytest.mark.parametrize("habit", HABITS)
@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_hydras_own_flags_work_on_every_entry_point(script: str, habit: str, tmp_path: Path) -> None:
    swept = [SWEPT.get(script, "seed=1,2")] if habit.startswith("-m") else []
    printed = shown(script, [*habit.split(), *swept], tmp_path)
    assert printed and HABITS[habit] in printed, printed[-2000:]
    assert not any(tmp_path.iterdir())  # showing a config runs nothing and writes nothing


def test_the_resolved_run_dir_is_the_one_a_run_gets(tmp_path: Path) -> None:
    printed = shown("src/train.py", ["--cfg", "job", "--resolve", "hydra.run.dir=somewhere"], tmp_path)
    assert "  output_dir: somewhere\n" in printed


def test_shell_completion_without_a_subcommand_is_one_line(tmp_path: Path) -> None:
    """`--shell-completion` alone was Hydra's ValueError traceback ("Expecting one subcommand"); its way out, typed
    (`-sc install=bash`), prints the completion script."""
    err = io.StringIO()
    GlobalHydra.instance().clear()
    with mock.patch.object(sys, "argv", ["src/eval.py", "--shell-completion"]), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.chdir(tmp_path), pytest.raises(SystemExit) as stop:
        runpy.run_path(str(ROOT / "src/eval.py"), run_name="__main__")
    assert stop.value.code == 2 and "Traceback" not in err.getvalue(), err.getvalue()[-2000:]
    line = err.getvalue().strip()
    assert line.startswith("gptlab: error: --shell-completion needs") and "\n" not in line, line
    assert "complete" in shown("src/eval.py", ["-sc", "install=bash"], tmp_path)
