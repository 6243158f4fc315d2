"""One val/loss however it was batched: the mean NLL over the scored tokens, the same (1e-6) at every
data.batch_size (a last partial batch included), on one rank or two, and eval.py on a run's best checkpoint gives
the val/loss the run logged for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import compose_config, run_script, scalars, train_in_process

from gptlab.apps.evaluate import evaluate
from gptlab.checkpoint.reader import load_model
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.train.source_metrics import ValidationSums

# Every val window scored (the training default), validated after the last step: the best checkpoint is the one
# whose val/loss the run logged last.
RUN = ["trainer.limit_val_batches=1.0", "trainer.max_steps=6",
       "trainer.val_check_interval=3", "callbacks.text_samples=null"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A trained run's best checkpoint and the val-best/loss it logged."""
    run_dir = tmp_path_factory.mktemp("run")
    train_in_process(run_dir, *RUN)
    (best,) = (p for p in (run_dir / "checkpoints").glob("step*.ckpt"))
    logged = scalars(run_dir)["val-best/loss"]
    return best, logged[max(logged)]


def _eval(ckpt: Path, out: Path, *overrides: str) -> dict[str, float]:
    return evaluate(compose_config([f"ckpt_path={ckpt}", f"paths.output_dir={out}", "trainer.accelerator=cpu",
                                    *overrides], config_name="eval"))


def _windows_of_eval(ckpt: Path) -> int:
    """How many val windows eval scores, to know which batch sizes leave a partial last batch."""
    from hydra.utils import instantiate

    cfg = compose_config(["model.block_size=32"], Path("/nonexistent"))
    datamodule = instantiate(cfg.data, tokenizer=ByteTokenizer())
    datamodule.setup("validate")
    return len(datamodule.val_dataloader().dataset)


def test_val_loss_is_the_same_at_every_batch_size_and_equals_the_logged_one(run, tmp_path: Path) -> None:
    ckpt, logged = run
    windows = _windows_of_eval(ckpt)
    sizes = (1, 7, 16, 32)
    assert any(windows % b for b in sizes), f"no batch size leaves a partial last batch of {windows} windows"
    losses = {b: _eval(ckpt, tmp_path / str(b), f"data.batch_size={b}")["val/loss"] for b in sizes}
    for b, loss in losses.items():
        assert loss == pytest.approx(losses[1], rel=1e-6, abs=0), (b, losses)
    assert losses[16] == pytest.approx(logged, rel=1e-6, abs=0)  # what training scored at its batch of 4


def test_val_loss_is_the_per_token_mean(run, tmp_path: Path) -> None:
    """Against a hand computation: every val window's summed NLL over the targets scored, no Lightning in between."""
    from hydra.utils import instantiate

    ckpt, _ = run
    model = load_model(ckpt)[0].eval()
    cfg = compose_config(["model.block_size=32"], tmp_path)
    datamodule = instantiate(cfg.data, tokenizer=ByteTokenizer())
    datamodule.setup("validate")
    nats, targets = 0.0, 0
    with torch.no_grad():
        for x, y in datamodule.val_dataloader():
            nats += float(F.cross_entropy(model(x).flatten(0, 1).double(), y.flatten(), reduction="sum"))
            targets += y.numel()
    assert _eval(ckpt, tmp_path / "e", "data.batch_size=7")["val/loss"] == pytest.approx(nats / targets, rel=1e-6)


def test_two_ranks_give_the_one_rank_val_loss(run, tmp_path: Path) -> None:
    ckpt, logged = run
    proc = run_script("src/eval.py", [f"ckpt_path={ckpt}", f"hydra.run.dir={tmp_path}", "trainer.accelerator=cpu",
                                      "trainer.devices=2", "+trainer.strategy=ddp", "data.batch_size=7"], threads=1,
                      check=True)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["val/loss"] == pytest.approx(logged, rel=1e-6, abs=0)


def test_a_partial_batch_weighs_its_own_tokens_only() -> None:
    """Two batches of 3 and 1 targets: the mean is over the 4 targets, not the mean of the two batch means."""
    sums = ValidationSums()
    sums.update(torch.tensor(1.0), torch.zeros(3, dtype=torch.long), torch.ones(4))
    sums.update(torch.tensor(5.0), torch.zeros(1, dtype=torch.long), torch.ones(4))
    loss, bpb = sums.compute(with_bpb=True)
    assert float(loss) == pytest.approx(2.0)  # (3 * 1 + 1 * 5) / 4, not (1 + 5) / 2
    assert float(bpb) == pytest.approx(8.0 / (4 * torch.log(torch.tensor(2.0)).item()))


def test_eval_names_the_overrides_that_score_the_runs_tokens_and_they_work(tmp_path: Path, caplog) -> None:
    """A run that validated on 2 batches of 4 windows: eval's defaults score every window and say so, and the
    overrides the warning names reproduce the run's logged val/loss."""
    run_dir = tmp_path / "run"
    train_in_process(run_dir, "trainer.limit_val_batches=2", "trainer.max_steps=3", "trainer.val_check_interval=3",
                     "callbacks.text_samples=null")
    logged = scalars(run_dir)["val/loss"][3]
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    with caplog.at_level("INFO"):
        default = _eval(ckpt, tmp_path / "a")["val/loss"]
    # issue 54: a note, not an error ("these are not the validation tokens ..." at WARNING read as one)
    (warning,) = [r.getMessage() for r in caplog.records if "to score the run's own" in r.getMessage()]
    assert warning.startswith("note: ") and all(r.levelname == "INFO" for r in caplog.records
                                                 if "to score the run's own" in r.getMessage())
    wanted = warning.rsplit("pass: ", 1)[1].split()
    assert wanted == ["trainer.limit_val_batches=2", "data.batch_size=4"]
    assert default != pytest.approx(logged, rel=1e-6)
    caplog.clear()
    with caplog.at_level("INFO"):
        assert _eval(ckpt, tmp_path / "b", *wanted)["val/loss"] == pytest.approx(logged, rel=1e-6, abs=0)
    assert not [r for r in caplog.records if "to score the run's own" in r.getMessage()]
