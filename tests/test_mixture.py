"""Weighted mixtures (data.source: gptlab.data.mixture.Mixture): the per-source share of training windows follows
the weights, x_data/tokens/<source> counts what was really trained on, validation reports each source, a resumed run
continues every source where it stopped (bit-exact), and bad mixtures are refused naming the field."""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import load_checkpoint, run_train, scalars, train_in_process

from gptlab.data import ByteTokenizer, GPTDataModule
from gptlab.data.mixture import Mixture
from gptlab.data.mixture_windows import MIXTURE_BLOCK, MixedWindows, quotas
from gptlab.data.sources import BuiltinSource
from gptlab.errors import ConfigError, PreemptedError

LETTERS, DIGITS = set(range(ord("a"), ord("m") + 1)), set(range(ord("0"), ord("9") + 1))


class Indexed(torch.utils.data.Dataset):
    """Window k of a source is (source, k): shows which window the mixture asked for."""

    def __init__(self, source: int) -> None:
        self.source = source

    def __getitem__(self, k: int) -> tuple[int, int]:
        return self.source, k


def test_quotas_sum_to_the_block_and_follow_the_weights() -> None:
    assert quotas([0.7, 0.3]).tolist() == [700, 300]
    assert quotas([1, 1, 1]).tolist() == [334, 333, 333]  # the leftover slot to the earliest of equal remainders
    assert quotas([5, 0]).tolist() == [1000, 0]


def test_mixed_windows_follow_weights_and_read_each_source_in_order() -> None:
    mixed = MixedWindows([Indexed(0), Indexed(1), Indexed(2)], [0.5, 0.3, 0.2], samples_per_epoch=10_000, seed=3)
    drawn = [mixed[i] for i in range(3 * MIXTURE_BLOCK + 123)]
    sources = np.array([s for s, _ in drawn])
    for s, share in enumerate([0.5, 0.3, 0.2]):
        ks = [k for src, k in drawn if src == s]
        assert ks == list(range(len(ks)))  # every window of the source once, in its own order, no gaps
        assert (sources[: 3 * MIXTURE_BLOCK] == s).sum() == 3 * MIXTURE_BLOCK * share  # exact per block
    for n in (0, 1, 999, 1000, 1001, 2500, len(drawn)):
        assert mixed.windows_before(n).tolist() == np.bincount(sources[:n], minlength=3).tolist()
    again = MixedWindows([Indexed(0), Indexed(1), Indexed(2)], [0.5, 0.3, 0.2], samples_per_epoch=10_000, seed=3)
    other_seed = MixedWindows([Indexed(0), Indexed(1), Indexed(2)], [0.5, 0.3, 0.2], samples_per_epoch=10_000, seed=4)
    assert [again[i] for i in range(500)] == drawn[:500]
    assert [other_seed[i] for i in range(500)] != drawn[:500]


def source(name: str = "pydocs") -> BuiltinSource:
    return BuiltinSource(name)


class OtherTokenizer(ByteTokenizer):
    name = "bytes-reversed"

    def encode(self, text: str) -> list[int]:
        return list(reversed(text.encode("utf-8")))


@pytest.mark.parametrize("sources,message", [
    ({}, r"data\.source\.sources is empty"),
    ({"a": {"weight": 1.0}}, r"data\.source\.sources\.a has no `source`"),
    ({"a": {"source": None, "weight": 1.0}}, r"data\.source\.sources\.a\.source is None, not a corpus"),
    ({"a": {"source": source(), "weight": -0.5}}, r"data\.source\.sources\.a\.weight=-0\.5 is invalid"),
    ({"a": {"source": source(), "weight": "much"}}, r"data\.source\.sources\.a\.weight='much' is invalid"),
    ({"a": {"source": source(), "weight": 0}, "b": {"source": source(), "weight": 0.0}}, r"every weight is 0"),
    ({"a": {"source": source(), "weight": 1, "wieght": 2}}, r"data\.source\.sources\.a has unknown keys \['wieght'\]"),
])
def test_bad_mixtures_are_refused_naming_the_field(sources: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Mixture(sources)


def test_sources_with_another_tokenizer_or_streaming_are_refused() -> None:
    mixed = Mixture({"a": {"source": source(), "weight": 1}, "b": {"source": source(), "weight": 1,
                                                                   "tokenizer": OtherTokenizer()}})
    with pytest.raises(ConfigError, match=r"data\.source\.sources\.b\.tokenizer is 'bytes-reversed', but the run "
                                          r"tokenizes with 'bytes'"):
        GPTDataModule(ByteTokenizer(), mixed, store="memory")
    same = Mixture({"a": {"source": source(), "weight": 1, "tokenizer": ByteTokenizer()}})
    GPTDataModule(ByteTokenizer(), same, store="memory")  # the run's own tokenizer, stated: accepted
    with pytest.raises(ConfigError, match=r"data\.store=streaming cannot read a mixture"):
        GPTDataModule(ByteTokenizer(), same, store="streaming")


def test_resume_with_other_weights_or_other_data_is_refused() -> None:
    def module(weights: tuple[float, float]) -> GPTDataModule:
        return GPTDataModule(ByteTokenizer(), Mixture({"a": {"source": source(), "weight": weights[0]},
                                                       "b": {"source": source(), "weight": weights[1]}}), "memory")

    saved = {"epoch": 0, "batches": 3, "mixture": {"weights": {"a": 0.7, "b": 0.3}, "windows": {"a": 70, "b": 30}}}
    module((0.7, 0.3)).load_state_dict(saved)
    with pytest.raises(ConfigError, match=r"mixture has weights \{'a': 0.7, 'b': 0.3\} but this run has "
                                          r"\{'a': 0.5, 'b': 0.5\}"):
        module((0.5, 0.5)).load_state_dict(saved)
    with pytest.raises(ConfigError, match="trained on one corpus, not a mixture"):
        module((0.7, 0.3)).load_state_dict({"epoch": 0, "batches": 3})
    with pytest.raises(ConfigError, match="trained on a mixture"):
        GPTDataModule(ByteTokenizer(), source(), store="memory").load_state_dict(saved)


def test_the_command_line_names_the_bad_weight(tmp_path: Path) -> None:
    proc = run_train(["data=mixture_example", "data.source.sources.pydocs.weight=-1",
                      f"paths.log_dir={tmp_path / 'outputs'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "gptlab: error: data.source.sources.pydocs.weight=-1 is invalid" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- real runs on two corpora told apart by their bytes: letters a-m, digits 0-9 ---------------------------------
def write_docs(path: Path, alphabet: str, seed: int) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(300):
            out.write(json.dumps({"text": "".join(rng.choice(alphabet) for _ in range(rng.randint(20, 200)))}) + "\n")


def mixture_args(letters: Path, digits: Path) -> list[str]:
    """A run on letters (weight 3) and digits (weight 1): the JSONL files in these dirs."""
    def entry(name: str, directory: Path, weight: int) -> str:
        return (f"{name}:{{source:{{_target_:gptlab.data.sources.TextFiles,paths:['{directory}/*.jsonl']}},"
                f"weight:{weight}}}")

    sources = f"{{{entry('letters', letters, 3)},{entry('digits', digits, 1)}}}"
    return ["data=mixture_example", "~data.source.sources", f"+data.source.sources={sources}",  # replace, not merge
            "data.val_fraction=0.1", "trainer.max_steps=12", "trainer.val_check_interval=6",
            "callbacks.text_samples=null", "+callbacks.record._target_=helpers.RecordBatches"]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpora")
    write_docs(root / "letters" / "a.jsonl", "abcdefghijklm", 0)
    write_docs(root / "digits" / "a.jsonl", "0123456789", 1)
    return root


@pytest.fixture(scope="module")
def mixture_overrides(corpora: Path) -> list[str]:
    return mixture_args(corpora / "letters", corpora / "digits")


def windows_by_source(batches: dict[int, list[torch.Tensor]], steps: range) -> dict[str, int]:
    counts = {"letters": 0, "digits": 0}
    for step in steps:
        for x in batches[step]:
            for row in x.tolist():
                is_letters, is_digits = bool(LETTERS & set(row)), bool(DIGITS & set(row))
                assert is_letters != is_digits, "a window mixes the two sources"
                counts["letters" if is_letters else "digits"] += 1
    return counts


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, mixture_overrides: list[str]) -> Path:
    run = tmp_path_factory.mktemp("reference")
    train_in_process(run, *mixture_overrides, f"+callbacks.record.path={run / 'batches.pt'}")
    return run


def test_tokens_per_source_are_logged_as_trained_and_follow_the_weights(reference: Path) -> None:
    logged = scalars(reference)
    batches = torch.load(reference / "batches.pt")
    assert sorted(batches) == list(range(12))
    for step in (0, 5, 11):
        counted = windows_by_source(batches, range(step + 1))
        # batch `step` is the (step + 1)th optimizer step: logged at the steps done
        assert {name: logged[f"x_data/tokens/{name}"][step + 1] for name in counted} == {
            name: 32.0 * windows for name, windows in counted.items()}
    total = windows_by_source(batches, range(12))
    assert sum(total.values()) == 12 * 4
    # 48 windows drawn at 3:1 (a block of 1000 slots holds exactly 750:250; 48 of them are a random draw):
    # the letters' share is 0.75 within 4 standard deviations of the hypergeometric draw (sd ~0.06).
    assert abs(total["letters"] / 48 - 0.75) < 4 * (0.75 * 0.25 / 48) ** 0.5


def test_validation_reports_each_source_and_overall(reference: Path) -> None:
    logged = scalars(reference)
    for step in (6, 12):  # the validations after the 6th and the 12th step
        letters, digits = logged["val/loss/letters"][step], logged["val/loss/digits"][step]
        assert letters != pytest.approx(digits, rel=1e-3)
        # Both sources evaluate the same number of windows (limit_val_batches=2 each): the overall val/loss is
        # their token-weighted mean.
        assert logged["val/loss"][step] == pytest.approx((letters + digits) / 2, rel=1e-5)
        # Byte tokens: every token but end-of-text is one byte, so bits per byte >= loss / ln 2.
        for name, loss in (("letters", letters), ("digits", digits)):
            assert logged[f"val/bpb/{name}"][step] >= loss / math.log(2) - 1e-6


def test_resumed_mixture_continues_every_source_exactly(reference: Path, tmp_path: Path,
                                                        mixture_overrides: list[str]) -> None:
    run = tmp_path / "run"
    record = f"+callbacks.record.path={run / 'batches.pt'}"
    killer = ["+callbacks.killer._target_=helpers.KillAtStep", "+callbacks.killer.step=6",
              "+callbacks.killer.signal_name=SIGTERM"]
    with pytest.raises(PreemptedError):
        train_in_process(run, *mixture_overrides, record, *killer)
    state = load_checkpoint(run / "checkpoints" / "last.ckpt")["GPTDataModule"]
    counted = windows_by_source(torch.load(run / "batches.pt"), range(7))
    assert state["mixture"] == {"weights": {"letters": 3.0, "digits": 1.0}, "windows": counted}
    train_in_process(run, *mixture_overrides, record, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    ours, theirs = torch.load(run / "batches.pt"), torch.load(reference / "batches.pt")
    assert sorted(ours) == list(range(12))
    for step in range(12):
        assert all(torch.equal(a, b) for a, b in zip(ours[step], theirs[step], strict=True)), step
    resumed, uninterrupted = scalars(run), scalars(reference)
    for tag in ("train/loss", "x_data/tokens/letters", "x_data/tokens/digits"):
        assert resumed[tag] == uninterrupted[tag], tag  # bit for bit
    assert resumed["val/loss/digits"][12] == uninterrupted["val/loss/digits"][12]


def test_example_config_builds_and_reads_both_builtin_corpora() -> None:
    from helpers import compose_config
    from hydra.utils import instantiate

    cfg = compose_config(["data=mixture_example", "data.block_size=64"])
    dm = instantiate(cfg.data, tokenizer=ByteTokenizer())
    assert dm.val_sources == ["pydocs", "python_stdlib"] and dm.store.mixture.weights == {
        "pydocs": 0.7, "python_stdlib": 0.3}
    assert [type(part.source) for part in dm.store.parts.values()] == [BuiltinSource, BuiltinSource]


def test_a_source_that_runs_out_starts_a_new_pass_and_says_so(tmp_path: Path, corpora: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """data.sampling=epoch: a small source read more often than it has windows repeats them, each pass every
    window once in a new order, and the run logs each new pass."""
    small = tmp_path / "small" / "a.jsonl"
    small.parent.mkdir()
    rng = random.Random(2)
    small.write_text("".join(json.dumps({"text": "".join(rng.choice("0123456789") for _ in range(12))}) + "\n"
                             for _ in range(40)))
    overrides = mixture_args(corpora / "letters", small.parent)
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="gptlab.train.callbacks.mixture"):
        train_in_process(run, *overrides, "data.sampling=epoch", "data.val_fraction=0.5", "trainer.max_steps=20",
                         f"+callbacks.record.path={run / 'batches.pt'}")
    batches = torch.load(run / "batches.pt")
    digits = [tuple(row) for step in range(20) for x in batches[step] for row in x.tolist() if DIGITS & set(row)]
    n = len(set(digits))  # the source's windows: about half of 40 * 13 tokens, / 32 per window
    assert 4 <= n <= len(digits) / 2
    assert len(set(digits[:n])) == n and set(digits[n : 2 * n]) == set(digits[:n])  # pass 2: each window once more
    assert digits[n : 2 * n] != digits[:n]  # in a new order
    passes = [r.getMessage() for r in caplog.records if "has read all" in r.getMessage()]
    assert passes[0] == (f"data: source 'digits' has read all {n} of its windows 1 time(s); pass 2 reads them in a "
                         "new order (data.sampling=epoch).")
    assert len(passes) == len(digits) // n


def test_the_banner_names_a_mixtures_sources() -> None:
    """The run's first lines said `data ?` for a mixture (the banner reads its source's name)."""
    mixture = Mixture({"docs": {"source": BuiltinSource("pydocs"), "weight": 3},
                       "stdlib": {"source": BuiltinSource("python_stdlib"), "weight": 1}})
    assert mixture.name == "mixture of docs (75%), stdlib (25%)"
