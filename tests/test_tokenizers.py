"""Tokenizers: the real GPT-2 ids, lossless round trips on the stdlib source, clear errors offline."""

import hashlib

import pytest
from helpers import compose_config

from gptlab.data.ranks import GPT2_RANKS_SHA256
from gptlab.data.sources import BuiltinSource, stdlib_files
from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer
from gptlab.errors import ConfigError
from gptlab.preflight.early_checks import build_model_config


def test_ranks_file_is_the_checked_one(gpt2_ranks):
    assert hashlib.sha256(gpt2_ranks.read_bytes()).hexdigest() == GPT2_RANKS_SHA256


def test_gpt2_known_ids(gpt2):
    assert gpt2.encode("The capital of France is") == [464, 3139, 286, 4881, 318]
    assert (gpt2.vocab_size, gpt2.eot_id) == (50257, 50256)
    assert gpt2.encode("Hello world") == [15496, 995]


def test_r50k_base_is_gpt2_with_same_ranks(gpt2, gpt2_ranks):
    r50k = TiktokenTokenizer("r50k_base", ranks_file=str(gpt2_ranks))
    text = "def f(x):\n    return x ** 2  # café"
    assert r50k.encode(text) == gpt2.encode(text) and r50k.vocab_size == 50257


def test_literal_endoftext_in_a_document_is_plain_text(gpt2):
    ids = gpt2.encode("a <|endoftext|> b")
    assert gpt2.eot_id not in ids and gpt2.decode(ids) == "a <|endoftext|> b"


def _stdlib_sample() -> list[str]:
    """Every 10th stdlib file, plus the ones that are not UTF-8 (their replacement characters must survive)."""
    docs = list(BuiltinSource("python_stdlib").documents())
    assert len(docs) == len(stdlib_files()) > 500
    return [d for i, d in enumerate(docs) if i % 10 == 0 or "\ufffd" in d]


def test_bytes_round_trip_on_python_stdlib():
    tok = ByteTokenizer()
    for text in BuiltinSource("python_stdlib").documents():
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode([104, 105, 256, 0xC3, 0xA9]) == "hi<|endoftext|>é"


def test_gpt2_round_trip_on_python_stdlib(gpt2):
    sample = _stdlib_sample()
    assert sum(map(len, sample)) > 2_000_000
    for text in sample:
        assert gpt2.decode(gpt2.encode(text)) == text
    assert gpt2.encode_array(sample[1]).tolist() == gpt2.encode(sample[1])


def test_download_failure_names_ranks_file(monkeypatch):
    import tiktoken

    def offline(name):
        raise ConnectionError("Failed to resolve 'openaipublic.blob.core.windows.net'")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(ConfigError, match=r"could not download.*tokenizer.ranks_file"):
        TiktokenTokenizer("cl100k_base")


def test_bad_ranks_file_and_encoding(tmp_path, gpt2_ranks):
    with pytest.raises(ConfigError, match="tokenizer.ranks_file=.*does not exist"):
        TiktokenTokenizer("gpt2", ranks_file=str(tmp_path / "missing.tiktoken"))
    with pytest.raises(ConfigError, match="tokenizer.encoding='gpt3'"):
        TiktokenTokenizer("gpt3", ranks_file=str(gpt2_ranks))
    with pytest.raises(ConfigError, match="not that of the cl100k_base ranks"):
        TiktokenTokenizer("cl100k_base", ranks_file=str(gpt2_ranks))


def test_model_vocab_from_tokenizer_and_too_small_vocab(gpt2):
    preset = compose_config(["model=nano"]).model
    assert build_model_config(preset, gpt2.vocab_size).vocab_size == 50257
    preset.vocab_size = 257
    with pytest.raises(ConfigError, match=r"50257 ids.*model.vocab_size=257"):
        build_model_config(preset, gpt2.vocab_size)
