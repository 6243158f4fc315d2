"""A trained run goes out as a Hugging Face directory and comes back; sample.py reads both and bad input exits 2."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from helpers import compose_config, run_script
from transformers import AutoModelForCausalLM, GPT2LMHeadModel

from gptlab.apps.train import train
from gptlab.checkpoint.reader import load_model
from gptlab.errors import ConfigError
from gptlab.eval.sampling import sample
from gptlab.interop import save_pretrained

SAMPLE = functools.partial(compose_config, config_name="sample")  # conf/sample.yaml, as src/sample.py composes it


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-step training run of a tiny model, with its checkpoint and config_resolved.yaml."""
    out = tmp_path_factory.mktemp("run")
    cfg = compose_config([
        "trainer=cpu", "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
        "trainer.enable_model_summary=false", "data.batch_size=2", "model.block_size=32", "model.n_layer=1",
        "model.n_embd=32", "model.n_head=2", "callbacks.progress_bar=null", "~logger", f"paths.output_dir={out}",
    ])
    train(cfg)
    assert (out / "checkpoints" / "last.ckpt").is_file()
    return out


def test_export_hf_script_writes_a_directory_transformers_loads(run_dir: Path, tmp_path: Path) -> None:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    done = run_script("scripts/export_hf.py", [f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}"])
    assert done.returncode == 0, done.stderr
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert isinstance(hf, GPT2LMHeadModel)
    model = load_model(ckpt)[0].eval()
    x = torch.randint(0, 257, (2, 32))
    with torch.no_grad():
        assert (model(x) - hf(x).logits).abs().max().item() <= 1e-5
    # The export records the run's tokenizer: sample.py needs no tokenizer= for it, nor for a run dir.
    greedy = ["prompt=Hi there", "temperature=0", "max_new_tokens=8", "stop_at_eot=false"]
    from_export = sample(SAMPLE([f"ckpt_path={tmp_path / 'hf'}", *greedy]))
    assert from_export == sample(SAMPLE([f"ckpt_path={run_dir}", *greedy]))
    assert from_export == sample(SAMPLE([f"ckpt_path={ckpt}", *greedy]))


def test_sample_from_checkpoint_and_hf_dir_agree(run_dir: Path, tmp_path: Path) -> None:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    model = load_model(ckpt)[0]
    save_pretrained(model, tmp_path / "hf")
    greedy = ["temperature=0", "max_new_tokens=12", "stop_at_eot=false"]
    # the checkpoint records its tokenizer (bytes)
    from_ckpt = sample(SAMPLE([f"ckpt_path={ckpt}", "prompt=Hi there", *greedy]))
    expected = model.generate(torch.tensor([list(b"Hi there")]), 12, temperature=0)[0].tolist()
    assert from_ckpt == [bytes(expected).decode("utf-8", errors="replace")]
    (tmp_path / "prompt.txt").write_text("Hi there", encoding="utf-8")
    from_hf = sample(SAMPLE([f"ckpt_path={tmp_path / 'hf'}", "tokenizer=bytes", "prompt=null",
                             f"prompt_file={tmp_path / 'prompt.txt'}", *greedy]))
    assert from_hf == from_ckpt
    several = sample(SAMPLE([f"ckpt_path={ckpt}", "prompt=Hi", "num_samples=3", "max_new_tokens=5"]))
    assert len(several) == 3 and all(text.startswith("Hi") for text in several)


def test_sample_bad_input(run_dir: Path, tmp_path: Path) -> None:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match="tokenizer=bytes"):  # an HF dir does not say which tokenizer
        model = load_model(ckpt)[0]
        save_pretrained(model, tmp_path / "hf")
        sample(SAMPLE([f"ckpt_path={tmp_path / 'hf'}"]))
    with pytest.raises(ConfigError, match="prompt_file"):
        sample(SAMPLE([f"ckpt_path={ckpt}", f"prompt_file={tmp_path / 'missing.txt'}", "prompt=null"]))
    done = run_script("src/sample.py", [f"ckpt_path={ckpt}", "top_p=1.5"])
    assert done.returncode == 2 and "top_p=1.5" in done.stderr and "Traceback" not in done.stderr


def test_checkpoint_shape_mismatch_lists_keys(run_dir: Path, tmp_path: Path) -> None:
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    ckpt["hyper_parameters"]["model"]["n_embd"] = 48
    torch.save(ckpt, tmp_path / "bad.ckpt")
    with pytest.raises(ConfigError) as err:
        load_model(tmp_path / "bad.ckpt")
    assert "tok_emb.weight: (257, 32)" in str(err.value) and "(257, 48)" in str(err.value)


def test_sample_refuses_what_it_would_ignore_or_misread(run_dir: Path) -> None:
    """Greedy decoding (temperature=0) ignores top_k/top_p: refused by the rule the training samples use. A
    tokenizer other than the one the model was trained with is refused by the check eval.py uses."""
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    for option in ("top_k=5", "top_p=0.9"):
        with pytest.raises(ConfigError, match=rf"{option.split('=')[0]}=.* has no effect: it matters only when "
                                              r"temperature > 0"):
            sample(SAMPLE([f"ckpt_path={ckpt}", "temperature=0", option, "max_new_tokens=2"]))
    with pytest.raises(ConfigError, match="the checkpoint was trained with tokenizer .*ByteTokenizer.* but this run "
                                          "has .*gpt2.*leave tokenizer out"):
        sample(SAMPLE([f"ckpt_path={ckpt}", "tokenizer=gpt2", "prompt=Hi", "max_new_tokens=2"]))
    assert len(sample(SAMPLE([f"ckpt_path={ckpt}", "tokenizer=bytes", "temperature=0", "max_new_tokens=2"]))) == 1
