"""gptlab.load: a run's model and tokenizer in one call; the docs' example runs as written (on a real run dir); a
checkpoint whose recorded tokenizer names another class is refused without calling it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch
from helpers import ROOT, train_in_process

import gptlab
from gptlab.apps.evaluate import evaluate
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.errors import ConfigError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    train_in_process(run_dir, "model.block_size=64", "trainer.max_steps=4", "trainer.val_check_interval=4",
                     "callbacks.text_samples=null")
    return run_dir


def test_load_gives_the_trained_model_and_its_tokenizer(run_dir: Path) -> None:
    model, tokenizer = gptlab.load(run_dir)
    assert isinstance(tokenizer, ByteTokenizer) and not model.training
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved[f"model.{name}"]), name
    assert gptlab.load(run_dir / "checkpoints" / "last.ckpt").model.config == model.config


def test_the_docs_example_runs_and_scores(run_dir: Path) -> None:
    text = (ROOT / "docs" / "without-lightning.md").read_text()
    section = text.split("## A trained run in two lines", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    code = re.sub(r'gptlab\.load\("[^"]+"\)', f"gptlab.load({str(run_dir)!r})", code)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "without-lightning.md", "exec"), {})
    loss, n = re.search(r"mean loss ([\d.]+) nats/token over (\d+) tokens", out.getvalue()).groups()
    assert int(n) == len(ByteTokenizer().encode("The model reads text one token at a time."))
    assert 0 < float(loss) < 10  # a model's NLL of text, not NaN or a constant
    scored = re.search(r"log p\(' Paris' \| context\) = (-[\d.]+) over 6 tokens", out.getvalue())
    # issue 54: the doc's two ways condition alike (they differed: an end-of-text prefix in one only)
    assert scored and f"by hand: {scored.group(1)}\n" in out.getvalue(), out.getvalue()


def test_a_recorded_tokenizer_that_names_other_code_is_refused(run_dir: Path, tmp_path: Path) -> None:
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    payload = tmp_path / "written_by_the_checkpoint.txt"
    ckpt["hyper_parameters"]["run"]["tokenizer"] = {"_target_": "numpy.savetxt", "fname": str(payload), "X": [1, 2]}
    crafted = tmp_path / "crafted.ckpt"
    torch.save(ckpt, crafted)
    with pytest.raises(ConfigError, match=r"numpy\.savetxt.*which gptlab does not build from a recorded config"):
        gptlab.load(crafted)
    assert not payload.exists()


def test_the_loaded_model_scores_as_eval_does(run_dir: Path, tmp_path: Path) -> None:
    """The same weights through gptlab.load and through eval.py give one val/loss."""
    from helpers import compose_config
    from hydra.utils import instantiate

    model, tokenizer = gptlab.load(run_dir / "checkpoints" / "last.ckpt")
    cfg = compose_config([f"model.block_size={model.config.block_size}"], tmp_path)
    datamodule = instantiate(cfg.data, tokenizer=tokenizer)
    datamodule.setup("validate")
    nats, targets = 0.0, 0
    with torch.no_grad():
        for x, y in datamodule.val_dataloader():
            nats += float(torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum"))
            targets += y.numel()
    got = evaluate(compose_config([f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", "trainer.accelerator=cpu",
                                   f"paths.output_dir={tmp_path / 'e'}"], config_name="eval"))["val/loss"]
    assert got == pytest.approx(nats / targets, rel=1e-5)
