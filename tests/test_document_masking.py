"""data.document_masking: a packed window with masking scores each document exactly as if it ran alone, for every
position scheme and attention kind; the DataModule delivers the document ids and a real run trains and validates
with them; a tokenizer without end-of-text is refused naming the field."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import compose_tiny, run_script, scalars, train_in_process

from gptlab.checkpoint.reader import load_model
from gptlab.data import ByteTokenizer, GPTDataModule
from gptlab.data.documents import document_ids
from gptlab.data.sources import BuiltinSource, TextFiles
from gptlab.errors import ConfigError
from gptlab.execution.checkpointing import checkpoint_blocks
from gptlab.model import GPT, GPTConfig
from gptlab.model.alibi import ALiBi
from gptlab.model.documents import Documents, positions_in_documents
from gptlab.model.sparse_attention import attend

EOT = 256
T = 24
# Two rows: ends of documents (end-of-text) at these positions; an empty document (two end-of-texts in a row),
# a window that starts in the middle of a document and one that ends inside one.
EOT_AT = [[4, 11, 12, 19], [0, 9, 23]]


def packed_window(seed: int = 0) -> torch.Tensor:
    x = torch.randint(0, 256, (len(EOT_AT), T), generator=torch.Generator().manual_seed(seed))
    for row, ends in enumerate(EOT_AT):
        x[row, ends] = EOT
    return x


def segments(ends: list[int]) -> list[tuple[int, int]]:
    """(start, stop) of each document in a row: an end-of-text closes the document it follows."""
    cuts = [0, *(e + 1 for e in ends if e + 1 < T), T]
    return list(zip(cuts[:-1], cuts[1:]))


def test_document_ids_and_positions() -> None:
    ids = document_ids(packed_window(), EOT)
    assert ids[0].tolist() == [0] * 5 + [1] * 7 + [2] + [3] * 7 + [4] * 4
    assert ids[1].tolist() == [0] + [1] * 9 + [2] * 14
    positions = positions_in_documents(ids)
    assert positions[0].tolist() == [*range(5), *range(7), 0, *range(7), *range(4)]
    assert positions[1].tolist() == [0, *range(9), *range(14)]


def token_losses(model: GPT, x: torch.Tensor, y: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
    logits = model(x, **kwargs)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none").view(y.shape)


@pytest.mark.parametrize("pos_emb", ["learned", "sinusoidal", "rope", "alibi"])
@pytest.mark.parametrize("pattern,impl", [(["dense", "local"], "auto"), (["strided", "local"], "chunked")])
def test_masked_window_equals_documents_run_alone(pos_emb: str, pattern: list[str], impl: str) -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=257, block_size=T, n_layer=2, n_head=2, n_embd=32, pos_emb=pos_emb,
                    attn_pattern=pattern, attn_window=3, attn_impl=impl)
    model = GPT(cfg).eval()
    x, y = packed_window(), packed_window(seed=1)  # any targets will do
    with torch.no_grad():
        packed = token_losses(model, x, y, doc_ids=document_ids(x, EOT))
        unmasked = token_losses(model, x, y)
        for row, ends in enumerate(EOT_AT):
            for start, stop in segments(ends):
                alone = token_losses(model, x[row : row + 1, start:stop], y[row : row + 1, start:stop])[0]
                torch.testing.assert_close(packed[row, start:stop], alone, rtol=1e-5, atol=1e-5)
    # Without masking the later documents see the earlier ones: the check above can tell the two apart.
    assert not torch.allclose(packed, unmasked, atol=1e-3)


def test_masked_gradients_flow_and_checkpointing_agrees() -> None:
    """Training with masking: activation checkpointing recomputes the same masked blocks (same loss and grads)."""
    x, y = packed_window(), packed_window(seed=1)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=257, block_size=T, n_layer=2, n_head=2, n_embd=32, pos_emb="rope")).train()
        if checkpointing:
            checkpoint_blocks(model, "full")  # runtime.activation_checkpointing's effect
        loss = token_losses(model, x, y, doc_ids=document_ids(x, EOT)).mean()
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


class NoEndOfText:
    name = "no-eot"
    vocab_size = 256
    eot_id = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode())


def test_tokenizer_without_end_of_text_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"end-of-text token \(eot_id\), for data\.document_masking") as e:
        GPTDataModule(NoEndOfText(), BuiltinSource("pydocs"), store="memory", document_masking=True)
    assert "'no-eot'" in str(e.value)
    with pytest.raises(ConfigError, match=r"data\.document_masking='yes' is invalid: use true or false\."):
        GPTDataModule(ByteTokenizer(), BuiltinSource("pydocs"), store="memory", document_masking="yes")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Short documents (~45-250 bytes), so that most windows hold a boundary."""
    directory = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    with open(directory / "docs.jsonl", "w", encoding="utf-8") as out:
        for d in range(400):
            text = f"doc {d}: " + " ".join(rng.choice(["the", "model", "café", "token", "東京"]) for _ in range(
                rng.randint(6, 40)))
            out.write(json.dumps({"text": text}) + "\n")
    return str(directory / "*.jsonl")


def corpus_module(corpus: str, **kwargs: int) -> GPTDataModule:
    return GPTDataModule(ByteTokenizer(), TextFiles(corpus), store="memory", val_fraction=0.1,
                         document_masking=True, **kwargs)


def test_datamodule_batches_carry_document_ids(corpus: str) -> None:
    dm = corpus_module(corpus, block_size=64, batch_size=8)
    dm.setup()
    x, y, ids = dm.on_before_batch_transfer(next(iter(dm.val_dataloader())), 0)
    ends = x == EOT
    assert ends.any()
    # ids rise by one right after each end-of-text, and only there
    assert torch.equal(ids[:, 1:] - ids[:, :-1], ends[:, :-1].to(ids.dtype))
    assert (ids[:, 0] == 0).all()


def run_overrides(corpus: str) -> list[str]:
    return ["data=text_files", f"data.source.paths=[{corpus}]", "data.store=memory", "data.val_fraction=0.1",
            "data.document_masking=true", "trainer.max_steps=2", "trainer.val_check_interval=2"]


@pytest.fixture(scope="module")
def masked_run(tmp_path_factory: pytest.TempPathFactory, corpus: str) -> Path:
    run = tmp_path_factory.mktemp("masked")
    assert math.isfinite(train_in_process(run, *run_overrides(corpus)))
    return run


def test_run_validates_with_masking(masked_run: Path, corpus: str) -> None:
    """The logged val/loss is the masked one: recomputed from the checkpoint with document ids it matches, and
    without them it does not."""
    cfg = compose_tiny(masked_run, *run_overrides(corpus))
    model, _ = load_model(masked_run / "checkpoints" / "last.ckpt")
    model.eval()
    dm = corpus_module(corpus, block_size=cfg.model.block_size, batch_size=cfg.data.batch_size)
    dm.setup()
    sums = {"masked": 0.0, "plain": 0.0}
    count = 0
    with torch.no_grad():
        for i, batch in enumerate(dm.val_dataloader()):
            if i == cfg.trainer.limit_val_batches:
                break
            x, y, ids = dm.on_before_batch_transfer(batch, 0)
            sums["masked"] += float(token_losses(model, x, y, doc_ids=ids).sum())
            sums["plain"] += float(token_losses(model, x, y).sum())
            count += y.numel()
    logged = scalars(masked_run)["val/loss"][2]
    # Two steps in, the model leans on context only a little: the two differ in the 4th digit, and the masked one
    # matches to float32 rounding.
    assert abs(logged - sums["masked"] / count) < 1e-6 * logged
    assert abs(logged - sums["plain"] / count) > 2e-5 * logged


def test_masking_benchmark_prints_its_table() -> None:
    proc = run_script("scripts/bench_document_masking.py",
                      ["--lengths", "64", "--patterns", "dense", "local", "--pos-embs", "rope", "--repeats", "1"],
                      check=True, threads=1)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 64 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["dense", "local"]
    for row in rows:
        plain, masked, ratio = (float(cell.strip().rstrip("x")) for cell in row.split("|")[4:7])
        assert plain > 0 and masked > 0 and ratio == pytest.approx(masked / plain, abs=0.01)


def test_flex_block_mask_equals_explicit_mask() -> None:
    """The GPU path (FlexAttention with the per-batch block mask) computes what the exact CPU path does; its
    forward runs on CPU too (each compile takes ~20 s here), so this checks one case that composes all three parts:
    a local layer's band, same document, and ALiBi's score_mod."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 128, 16) for _ in range(3))
    ends = torch.rand(2, 128, generator=torch.Generator().manual_seed(0)) < 0.05
    documents = Documents(ends.int().cumsum(-1) - ends.int())
    with torch.no_grad():
        exact = attend(q, k, v, "local", 16, "sdpa", bias=ALiBi(2), documents=documents)
        flex = attend(q, k, v, "local", 16, "flex", bias=ALiBi(2), documents=documents)
    torch.testing.assert_close(flex, exact, rtol=1e-5, atol=1e-5)
    unmasked = attend(q, k, v, "local", 16, "sdpa", bias=ALiBi(2))
    assert not torch.allclose(flex, unmasked, atol=1e-3)


@pytest.mark.parametrize("kind", ["local", "strided"])
@pytest.mark.parametrize("alibi", [False, True])
def test_chunked_kernels_honour_documents_without_a_t_by_t_mask(monkeypatch, kind: str, alibi: bool) -> None:
    """attn_impl=chunked (and auto's choice of it) under document masking used to build the (B, 1, T, T) mask and
    run SDPA over every pair: the band kernel was never used. Now the chunked kernels add "same document" to their
    own block masks; forward and gradients equal the exact path, with a ragged T and documents crossing blocks."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 37, 8, requires_grad=True) for _ in range(3))
    ends = torch.rand(2, 37, generator=torch.Generator().manual_seed(1)) < 0.15
    ids = ends.long().cumsum(-1) - ends.long()
    bias = ALiBi(2) if alibi else None
    exact = attend(q, k, v, kind, 5, "sdpa", bias=bias, documents=Documents(ids))
    exact_grads = torch.autograd.grad(exact.square().sum(), (q, k, v))
    monkeypatch.setattr(Documents, "mask", lambda *a, **kw: pytest.fail("a T x T mask was built"))
    for impl in ("chunked", "auto"):
        out = attend(q, k, v, kind, 5, impl, bias=bias, documents=Documents(ids))
        torch.testing.assert_close(out, exact, rtol=1e-5, atol=1e-5)
        for got, want in zip(torch.autograd.grad(out.square().sum(), (q, k, v)), exact_grads):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
