"""What the entry points import before they do anything (issue 55 item 1): a config error and --cfg job are
answered from Hydra and gptlab's config alone, never Lightning, torchmetrics or transformers (seconds of CPU), and
every script's --help before torch, scipy or MLflow (a Hydra app's composes its config, which imports torch).
scripts/bench_startup.py times them; this checks which modules they load, which no machine load changes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import CHECKOUT_ENV, ROOT, TINY, run_tiny

HEAVY = ("lightning", "lightning_fabric", "pytorch_lightning", "torchmetrics", "transformers",
         "torch.distributed.checkpoint", "torch._dynamo")

# Runs each entry script's main() in one fresh interpreter (the tests' zygote has Lightning imported already), then
# prints which of the watched modules (argv[2]) it had imported and the exit codes.
DRIVER = """
import json, runpy, sys
from hydra.core.global_hydra import GlobalHydra
runs, heavy, codes = json.loads(sys.argv[1]), json.loads(sys.argv[2]), []
for script, args in runs:
    GlobalHydra.instance().clear()
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
        codes.append(0)
    except SystemExit as exit:
        codes.append(exit.code)
print(json.dumps({"codes": codes, "heavy": sorted(m for m in heavy if m in sys.modules)}))
"""


def drive(runs: list[tuple[str, list[str]]], watched=HEAVY,
          cwd: Path = ROOT) -> tuple[dict, subprocess.CompletedProcess]:
    """DRIVER over `runs` ((script, args) pairs, in one fresh interpreter): the exit codes and which of `watched`
    were imported; and the process, for its output."""
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(runs), json.dumps(list(watched))], cwd=cwd,
                          env=CHECKOUT_ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def test_config_errors_and_cfg_job_never_import_lightning(tmp_path) -> None:
    runs = [("src/train.py", ["model.n_layerr=2"]), ("src/train.py", ["--cfg", "job"]),
            ("src/eval.py", ["--cfg", "job", "ckpt_path=x.ckpt"]), ("src/sample.py", ["--cfg", "job", "ckpt_path=x"]),
            # a callback's own key (an unlisted one used to import its class, and with it Lightning, to read its
            # arguments), and the machine's refusal, which needs no _target_
            ("src/train.py", ["callbacks.preemption_checkpoint.grace_seconds=-1", f"hydra.run.dir={tmp_path / 'a'}"]),
            ("src/train.py", ["trainer.devices=64", f"hydra.run.dir={tmp_path / 'b'}"])]
    seen, proc = drive(runs)
    assert seen["codes"] == [2, 0, 0, 0, 2, 2], proc.stderr[-3000:]
    assert "model.n_layerr is not a key of model" in proc.stderr
    assert seen["heavy"] == [], f"imported before any work: {seen['heavy']}"


def test_a_run_dir_that_needs_no_training_is_answered_without_lightning(tmp_path) -> None:
    """resume=auto on a finished run (nothing to do) and a new run into a dir that holds one (refused): the run dir's
    verdict comes before the checks that import Lightning (the issue measured the first at 270 s at load 18)."""
    run_dir = tmp_path / "run"
    steps = ["trainer.max_steps=2", "trainer.val_check_interval=2"]
    run_tiny(run_dir, *steps)
    given = [*TINY, *steps, f"hydra.run.dir={run_dir}"]
    runs = [("src/train.py", [*given, "resume=auto"]), ("src/train.py", given)]
    seen, proc = drive(runs)
    assert seen["codes"] == [0, 2], proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"{run_dir} is finished" in proc.stdout and "holds" in proc.stderr, proc.stdout + proc.stderr
    assert seen["heavy"] == [], f"imported to answer a dir that needs no training: {seen['heavy']}"


NOT_FOR_HELP = ("torch", "scipy", "mlflow", *HEAVY)  # a script parses its arguments before it imports these

def hydra_app(script: Path) -> bool:
    """A script whose arguments are Hydra overrides: its --help composes the config."""
    return re.search(r"\b(gptlab_main|hydra\.main)\(", script.read_text(encoding="utf-8")) is not None


def test_every_script_answers_help_before_its_heavy_imports(tmp_path) -> None:
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    hydra = [s for s in scripts if hydra_app(s)]
    assert 0 < len(hydra) < len(scripts), f"Hydra apps among scripts/: {hydra}"
    seen = {"Hydra apps together (each imports torch with its config)":
            drive([(str(s), ["--help"]) for s in hydra], HEAVY, tmp_path)[0]}
    for script in set(scripts) - set(hydra):  # each alone, so every one that imports a module is named
        seen[script.name] = drive([(str(script), ["--help"])], NOT_FOR_HELP, tmp_path)[0]
    codes = {name: v["codes"] for name, v in seen.items() if set(v["codes"]) != {0}}
    assert codes == {}, f"--help did not exit 0: {codes}"
    heavy = {name: v["heavy"] for name, v in sorted(seen.items()) if v["heavy"]}
    assert heavy == {}, "--help imported these before parsing"
