"""What the entry points import before they do anything (issue 55 item 1): a config error and --cfg job are
answered from Hydra and gptlab's config alone, never Lightning, torchmetrics or transformers (seconds of CPU).
scripts/bench_startup.py times them; this checks which modules they load, which no machine load changes."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import CHECKOUT_ENV, ROOT

HEAVY = ("lightning", "lightning_fabric", "pytorch_lightning", "torchmetrics", "transformers",
         "torch.distributed.checkpoint", "torch._dynamo")

# Runs each entry script's main() in one fresh interpreter (the tests' zygote has Lightning imported already), then
# prints which of HEAVY it had imported and the exit codes.
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


def test_config_errors_and_cfg_job_never_import_lightning(tmp_path) -> None:
    runs = [("src/train.py", ["model.n_layerr=2"]), ("src/train.py", ["--cfg", "job"]),
            ("src/eval.py", ["--cfg", "job", "ckpt_path=x.ckpt"]), ("src/sample.py", ["--cfg", "job", "ckpt_path=x"]),
            # a callback's own key (an unlisted one used to import its class, and with it Lightning, to read its
            # arguments), and the machine's refusal, which needs no _target_
            ("src/train.py", ["callbacks.preemption_checkpoint.grace_seconds=-1", f"hydra.run.dir={tmp_path / 'a'}"]),
            ("src/train.py", ["trainer.devices=64", f"hydra.run.dir={tmp_path / 'b'}"])]
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(runs), json.dumps(HEAVY)], cwd=ROOT,
                          env=CHECKOUT_ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["codes"] == [2, 0, 0, 0, 2, 2], proc.stderr[-3000:]
    assert "model.n_layerr is not a key of model" in proc.stderr
    assert seen["heavy"] == [], f"imported before any work: {seen['heavy']}"
