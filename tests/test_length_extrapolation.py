"""Length extrapolation (eval.py contexts=[...]): a model rebuilt at a longer context computes the same logits on
the positions it had; every context scores the same targets, as a token mean and by position; learned positions, a
context longer than the validation split and bad lists are refused by name; a sweep dir is scored job by job and the
ablation report compares the variants at another context."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import TINY, compose_config, run_train, write_corpus
from omegaconf import OmegaConf

from gptlab.apps.context_eval import Validation, check_contexts, check_span
from gptlab.apps.evaluate import evaluate
from gptlab.config.rules import windows_fit_the_context
from gptlab.errors import ConfigError
from gptlab.eval.extrapolation import model_at_context, score_context, scored_span
from gptlab.model import GPT, GPTConfig
from gptlab.model.context import longest_context
from gptlab.report.context_report import write_context_report

SCALABLE = ("alibi", "rope", "sinusoidal", "none")


def _model(pos_emb: str, block_size: int = 8) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=16, block_size=block_size, n_layer=2, n_head=2, n_embd=16, pos_emb=pos_emb)).eval()


@pytest.mark.parametrize("pos_emb", SCALABLE)
def test_a_longer_model_keeps_the_trained_positions(pos_emb: str) -> None:
    """Causal attention: the first 8 logits of a 24-token window depend on those 8 tokens alone, so the model rebuilt
    for 24 positions must give exactly the logits the 8-position model gives, and go on past them."""
    model = _model(pos_emb)
    longer = model_at_context(model, 24)
    assert longer.config.block_size == 24 and model.config.block_size == 8
    x = torch.randint(0, 16, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        long_logits = longer(x)
        torch.testing.assert_close(long_logits[:, :8], model(x[:, :8]), rtol=1e-5, atol=1e-5)
    assert torch.isfinite(long_logits).all()
    with pytest.raises(ValueError, match="exceeds model.block_size=8"):  # the original is untouched
        model(x)


def test_learned_positions_are_refused_past_their_table() -> None:
    model = _model("learned")
    assert longest_context(model.config) == 8
    assert all(longest_context(_model(p).config) is None for p in SCALABLE)
    assert model_at_context(model, 8) is model  # at or below the table: the model as it is
    with pytest.raises(ConfigError) as err:
        model_at_context(model, 16)
    message = str(err.value)
    assert "contexts has 16" in message and "model.pos_emb=learned" in message
    assert "model.block_size=8" in message and "pos_emb.weight" in message and "at most 8" in message


def test_every_context_scores_the_same_targets_as_a_token_mean() -> None:
    model = _model("alibi")
    tokens = np.random.default_rng(0).integers(0, 16, size=300).astype(np.uint16)
    span = scored_span(len(tokens), [8, 16, 32])
    assert span == 288  # 299 targets, rounded down to a multiple of 32 (the lcm)
    scores = [score_context(model, tokens, c, span, batch_windows=3, device=torch.device("cpu")) for c in (8, 16, 32)]
    assert [s.tokens for s in scores] == [span] * 3 and [s.windows for s in scores] == [36, 18, 9]
    for s in scores:
        longer = model_at_context(model, s.context)
        x = torch.from_numpy(tokens[:span].astype(np.int64)).view(-1, s.context)
        y = torch.from_numpy(tokens[1 : span + 1].astype(np.int64)).view(-1, s.context)
        with torch.no_grad():
            nll = F.cross_entropy(longer(x).flatten(0, 1), y.flatten(), reduction="none").view_as(y)
        assert s.loss == pytest.approx(nll.mean().item(), rel=1e-6)  # one mean over all targets
        assert s.by_position == pytest.approx(nll.mean(dim=0).tolist(), rel=1e-5)
        assert s.ppl == pytest.approx(math.exp(s.loss))
    assert scores[0].by_position == pytest.approx(scores[1].by_position[:8], rel=0.2)  # same positions, other text
    assert scored_span(100, [64, 96]) == 0  # lcm 192: no common multiple fits


def test_context_targets_caps_the_span_at_a_common_multiple() -> None:
    val = Validation(np.zeros(1000, dtype=np.uint16), None, "data.source {'name': 'x'}")
    assert check_span(val, [64, 128]) == 896 and check_span(val, [64, 128], 300) == 256
    with pytest.raises(ConfigError, match="context_targets=100 is fewer than one window of every context"):
        check_span(val, [64, 128], 100)
    with pytest.raises(ConfigError, match=r"contexts has 1000, longer than the validation split of data.source"):
        check_span(val, [64, 1000])


@pytest.mark.parametrize("value, fragment", [("64", "must be a list"), ([64, 0], "positive integers"),
                                             ([64, 64], "repeats a length"), ([64, "x"], "positive integers")])
def test_bad_contexts_are_refused(value: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        check_contexts(value)
    assert check_contexts([256, 64, 128]) == [64, 128, 256]


def test_the_block_size_rule_names_what_limits_the_context() -> None:
    learned = OmegaConf.create({"model": {"block_size": 64, "pos_emb": "learned", "n_embd": 8},
                                "data": {"block_size": 128}})
    message = windows_fit_the_context(learned)
    assert "learned position table" in message and "model.block_size=128" in message and "eval.py" not in message
    rope = OmegaConf.create({"model": {"block_size": 64, "pos_emb": "rope", "n_embd": 8}, "data": {"block_size": 128}})
    message = windows_fit_the_context(rope)
    assert "any length" in message and "contexts=[64,128]" in message
    assert "has positions for" not in message


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `-m` sweep: rope and learned, trained at 32 tokens for 2 steps."""
    root = tmp_path_factory.mktemp("sweep")
    sweep_dir = root / "sweep"
    proc = run_train(["-m", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "callbacks.text_samples=null",
                      "model.pos_emb=rope,learned", f"hydra.sweep.dir={sweep_dir}"], cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A corpus of a few thousand validation tokens (same byte tokenizer as training): scoring stays quick."""
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))
    return ["data=text_files", "data.store=memory", "data.val_fraction=0.1",
            f"data.source.paths=[{corpus[0].parent}/*.jsonl]"]


def _eval(sweep_or_ckpt: Path, out: Path, data: list[str], *overrides: str) -> dict:
    cfg = compose_config([f"ckpt_path={sweep_or_ckpt}", f"paths.output_dir={out}", "trainer.accelerator=cpu",
                          "data.batch_size=4", *data, *overrides], config_name="eval")
    out.mkdir(parents=True, exist_ok=True)
    evaluate(cfg)
    return json.loads((out / "eval.json").read_text())


def test_one_checkpoint_at_several_contexts(sweep: Path, tmp_path: Path, small_data: list[str]) -> None:
    result = _eval(sweep / "0", tmp_path / "eval", small_data, "contexts=[32,64,128]", "val_loss=false")
    losses = [result[f"contexts/{c}/loss"] for c in (32, 64, 128)]
    assert all(math.isfinite(v) for v in losses) and len(set(losses)) == 3
    record = json.loads((tmp_path / "eval" / "context_eval.json").read_text())
    assert record["pos_emb"] == "rope" and record["trained_context"] == 32
    assert {c: v["loss"] for c, v in record["contexts"].items()} == dict(zip(("32", "64", "128"), losses))
    assert [len(record["loss_by_position"][c]) for c in ("32", "64", "128")] == [32, 64, 128]
    csv = (tmp_path / "eval" / "loss_by_position.csv").read_text().splitlines()
    assert csv[0] == "position,loss@32,loss@64,loss@128" and len(csv) == 129
    assert (tmp_path / "eval" / "loss_by_position.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="model.pos_emb=learned is a table of exactly model.block_size=32"):
        _eval(sweep / "1", tmp_path / "learned", small_data, "contexts=[32,64]", "val_loss=false")
    with pytest.raises(ConfigError, match=r"contexts has 20000, longer than the validation split of data.source "
                                          r".*text_files.* holds \d+ tokens.*data.val_fraction"):
        _eval(sweep / "0", tmp_path / "long", small_data, "contexts=[32,20000]", "val_loss=false")
    with pytest.raises(ConfigError, match=r"contexts has 1000000: one window's attention scores take model.n_head"):
        _eval(sweep / "0", tmp_path / "huge", small_data, "contexts=[1000000]", "val_loss=false")


def test_a_sweep_dir_is_scored_and_reported_at_another_context(sweep: Path, tmp_path: Path,
                                                               small_data: list[str]) -> None:
    with pytest.raises(ConfigError, match="is a sweep dir.*contexts=\\[64,128,256\\]"):
        _eval(sweep, tmp_path / "none", small_data)
    unfinished = sweep / "7"
    (unfinished / ".hydra").mkdir(parents=True)
    summary = _eval(sweep, tmp_path / "eval", small_data, "contexts=[32,64]")
    assert sorted(summary["jobs"]) == ["0", "1"] and list(summary["skipped"]) == ["7"]
    # issue 54: a sweep-mode eval.json had no val/loss; each job's own, from its run summary, named as such
    assert summary["val/loss"] == {j: json.loads((sweep / j / "run_summary.json").read_text())["final_val_loss"]
                                   for j in ("0", "1")} and "run_summary.json" in summary["val/loss_from"]
    from gptlab.apps.context_eval import job_title

    assert job_title(sweep / "1") == "job 1: model.pos_emb=learned"  # its PNG panel: the variant, not "1"
    assert "not finished" in summary["skipped"]["7"]
    stamp = (sweep / "0" / "context_eval.json").stat().st_mtime_ns
    again = _eval(sweep, tmp_path / "again", small_data, "contexts=[32,64]")  # scored already: kept as it is
    assert again["jobs"] == summary["jobs"] and (sweep / "0" / "context_eval.json").stat().st_mtime_ns == stamp
    (unfinished / ".hydra").rmdir()
    unfinished.rmdir()
    learned = json.loads((sweep / "1" / "context_eval.json").read_text())
    assert "loss" in learned["contexts"]["32"] and "pos_emb.weight" in learned["contexts"]["64"]["refused"]
    rope = json.loads((sweep / "0" / "context_eval.json").read_text())
    assert rope["scored_targets"] == learned["scored_targets"]  # one span for every job
    table, plot = write_context_report(sweep, 64, baseline="model.pos_emb=rope")
    text = table.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| model.pos_emb=rope"))
    assert f"{rope['contexts']['64']['loss']:.4f}" in row
    assert f"{rope['contexts']['64']['loss'] - rope['contexts']['32']['loss']:+.4f}" in row
    assert "model.pos_emb=learned: refused at context 64" in text and "## Refused at context 64" in text
    assert plot.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="baseline model.pos_emb=learned has no loss at context 64"):
        write_context_report(sweep, 64, baseline="model.pos_emb=learned")
    with pytest.raises(ConfigError, match="no job of .* has a loss at context 128.*contexts scored: \\[32, 64\\]"):
        write_context_report(sweep, 128)
