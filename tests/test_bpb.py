"""val/bpb: the summed validation NLL over ln 2 times the UTF-8 bytes of exactly the evaluated targets, checked by
hand for the byte and the GPT-2 tokenizer on the same text (the same bytes, whatever the tokens)."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from gptlab.data.tokenizers import ByteTokenizer
from gptlab.model import GPT, GPTConfig
from gptlab.train.module import GPTLitModule

# Two windows of very different lengths and byte densities (ASCII, then 3-byte CJK characters): bpb over both must
# be the total nats over the total bytes, not the mean of the two windows' bpb.
TEXTS = ("The model reads text, one token at a time, and predicts the next one from those before it. ",
         "東京の天気は晴れです。café naïve")


def _windows(tokenizer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One window per text, [eot, text..., eot]: every byte of the text is in a target, and the final eot is a
    target of 0 bytes."""
    out = []
    for text in TEXTS:
        ids = torch.tensor([tokenizer.eot_id, *tokenizer.encode(text), tokenizer.eot_id])
        out.append((ids[:-1], ids[1:]))
    return out


def _validate(tokenizer, windows) -> tuple[dict[str, float], GPT]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, n_embd=32, block_size=128))
    module = GPTLitModule(model, token_bytes=torch.from_numpy(tokenizer.token_byte_lengths()))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    loader = DataLoader([(x, y) for x, y in windows], batch_size=1)  # one window per batch: two batches
    return trainer.validate(module, dataloaders=loader, verbose=False)[0], model


def _nats(model: GPT, window: tuple[torch.Tensor, torch.Tensor]) -> float:
    x, y = window
    with torch.no_grad():
        return float(F.cross_entropy(model(x[None])[0], y, reduction="sum"))


def _hand_bpb(model: GPT, windows) -> float:
    text_bytes = sum(len(text.encode("utf-8")) for text in TEXTS)  # eot excluded; ASCII 1, é 2, 東 3 bytes
    return sum(_nats(model, w) for w in windows) / (math.log(2) * text_bytes)


def test_byte_tokenizer_bpb_is_total_nats_over_total_text_bytes() -> None:
    tokenizer = ByteTokenizer()
    windows = _windows(tokenizer)
    results, model = _validate(tokenizer, windows)
    assert results["val/bpb"] == pytest.approx(_hand_bpb(model, windows), rel=1e-5)
    assert abs(results["val/bpb"] - results["val/loss"] / math.log(2)) > 0.05  # eot targets: loss but no bytes


def test_gpt2_tokenizer_bpb_counts_the_same_bytes(gpt2) -> None:
    windows = _windows(gpt2)
    assert sum(len(y) for _, y in windows) < sum(len(t.encode()) for t in TEXTS)  # BPE: fewer tokens than bytes
    results, model = _validate(gpt2, windows)
    assert results["val/bpb"] == pytest.approx(_hand_bpb(model, windows), rel=1e-5)
    per_window = [_nats(model, w) / (math.log(2) * len(t.encode("utf-8"))) for w, t in zip(windows, TEXTS)]
    assert abs(results["val/bpb"] - sum(per_window) / 2) > 0.2  # summed over batches, not averaged per batch


def test_token_byte_lengths(gpt2) -> None:
    lengths = gpt2.token_byte_lengths()
    assert lengths[gpt2.eot_id] == 0 and lengths[gpt2.encode(" the")[0]] == 4
    for text in TEXTS:
        assert sum(int(lengths[i]) for i in gpt2.encode(text)) == len(text.encode("utf-8"))
    byte_lengths = ByteTokenizer().token_byte_lengths()
    assert byte_lengths.tolist() == [1] * 256 + [0]

