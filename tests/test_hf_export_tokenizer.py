"""export_hf writes tokenizer files that transformers loads with the same ids as gptlab, and bos/eos ids that
exist in the vocabulary."""

from __future__ import annotations

import json

import torch
from helpers import compose_config, run_script
from transformers import AutoModelForCausalLM, AutoTokenizer

from gptlab.apps.train import train
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.interop.hf_export import export_tokenizer

TEXT = "Hello, world! café 東京 🙂\n  def f(x): return x ** 2<|endoftext|>"


def test_byte_run_exports_a_tokenizer_with_its_ids(tmp_path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                          "data.batch_size=2", "trainer.accelerator=cpu", "trainer.max_steps=1",
                          "scheduler.warmup_steps=0", "trainer.limit_val_batches=1", "callbacks.progress_bar=null",
                          "callbacks.text_samples=null", "~logger"], run_dir))
    out = tmp_path / "hf"
    done = run_script("scripts/export_hf.py", [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"out={out}"])
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["bos_token_id"] == config["eos_token_id"] == 256 < config["vocab_size"] == 257
    hf_tok = AutoTokenizer.from_pretrained(out)
    ours = ByteTokenizer()
    body = TEXT.replace("<|endoftext|>", "")
    assert hf_tok(body)["input_ids"] == ours.encode(body)
    assert hf_tok.eos_token_id == 256 and hf_tok.decode(ours.encode(body)) == body
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([hf_tok(body)["input_ids"][:16]])
    assert model(ids).logits.shape == (1, 16, 257)


def test_gpt2_tokenizer_files_match_tiktoken(gpt2, tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 1024, "vocab_size": 50257}))
    export_tokenizer(gpt2, tmp_path)
    hf_tok = AutoTokenizer.from_pretrained(tmp_path)
    body = TEXT.replace("<|endoftext|>", "")
    assert hf_tok(body)["input_ids"] == gpt2.encode(body)
    assert hf_tok.eos_token_id == 50256 and hf_tok.decode(gpt2.encode(body)) == body
    assert json.loads((tmp_path / "config.json").read_text())["eos_token_id"] == 50256
