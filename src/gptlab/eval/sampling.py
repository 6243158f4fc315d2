"""`sample(cfg)`: load a trained run or a Hugging Face directory, encode a prompt, decode, and return the texts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from gptlab.checkpoint.reader import check_tokenizer_matches, recorded_tokenizer, resolve_checkpoint
from gptlab.checkpoint.reader import load_model as load_checkpoint_model
from gptlab.config.ranges import boolean, check_table, integer, non_negative_int, number, optional, positive_int
from gptlab.errors import ConfigError
from gptlab.interop import from_pretrained
from gptlab.interop.hf_export import CONFIG_FILE as HF_CONFIG_FILE
from gptlab.interop.hf_export import read_exported_tokenizer
from gptlab.model import GPT
from gptlab.preflight.devices import check_device
from gptlab.preflight.option_relevance import SAMPLE_RULES, ignored_options, sampling_defaults
from gptlab.recorded import build_recorded, check_recorded


def is_hf_directory(path: str) -> bool:
    return (Path(path) / "config.json").is_file()


def recording_file(path: str) -> str:
    """The file that records the tokenizer of the model at `path`: a Hugging Face directory's config.json, else the
    checkpoint (a run dir's newest that loads)."""
    return str(Path(path) / HF_CONFIG_FILE) if is_hf_directory(path) else str(resolve_checkpoint(path))


def load_model(path: str, what: str = "ckpt_path") -> tuple[GPT, Any]:
    """The model and the tokenizer config it was trained with (None if not recorded), a trusted one only
    (gptlab.recorded). A directory with config.json is a Hugging Face model (scripts/export_hf.py records the
    tokenizer there); a file is a checkpoint written by src/train.py, and another directory a run dir (its newest
    checkpoint that loads)."""
    if is_hf_directory(path):
        model = from_pretrained(Path(path))  # refuses a config.json that is not a model's first
        recorded = read_exported_tokenizer(Path(path))
        check_recorded(recorded, "tokenizer", recording_file(path))
        return model, recorded
    model, hparams = load_checkpoint_model(path, what)
    return model, recorded_tokenizer(hparams)


def load_tokenizer(cfg: DictConfig, recorded: Any) -> Any:
    """The tokenizer named in cfg (only the one the model was trained with, where it says), else that one."""
    if cfg.get("tokenizer") is not None:
        check_tokenizer_matches(recorded, OmegaConf.to_container(cfg.tokenizer, resolve=True),
                                "leave tokenizer out: sample.py then uses the one the model was trained with")
        return hydra.utils.instantiate(cfg.tokenizer)
    if recorded is None:
        raise ConfigError(f"no tokenizer for ckpt_path={cfg.ckpt_path!r}: it does not record the one it was trained "
                          "with; choose one, e.g. tokenizer=bytes.")
    return build_recorded(recorded, "tokenizer", recording_file(cfg.ckpt_path))


# conf/sample.yaml's numbers and switches (Hydra hands `top_k=abc` over as a string; generate would fail deep inside).
SAMPLE = {
    "num_samples": positive_int,
    "max_new_tokens": non_negative_int,
    "temperature": number(0.0),
    "top_k": optional(positive_int),
    "top_p": optional(number(0.0, 1.0, low_open=True)),
    "num_beams": positive_int,
    "stop_at_eot": boolean,
    "seed": integer(),
}
DEFAULT_PROMPT = "\n"  # a fresh document: what the model writes unprompted


def read_prompt(cfg: DictConfig) -> str:
    """prompt, or the text of prompt_file, or DEFAULT_PROMPT when neither is given."""
    if cfg.prompt_file is not None:
        if cfg.prompt is not None:
            raise ConfigError("both prompt and prompt_file are set; keep one (prompt=null or prompt_file=null).")
        path = Path(cfg.prompt_file)
        if not path.is_file():
            problem = "is a directory" if path.is_dir() else "does not exist"
            raise ConfigError(f"prompt_file={cfg.prompt_file!r} {problem}; give a UTF-8 text file, or drop "
                              "prompt_file to start a fresh document.")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"prompt_file={cfg.prompt_file!r} is not UTF-8 text ({err.reason} at byte {err.start}); "
                              "give a UTF-8 text file, or drop prompt_file to start a fresh document.") from err
    return DEFAULT_PROMPT if cfg.prompt is None else str(cfg.prompt)


def sample(cfg: DictConfig) -> list[str]:
    """num_samples continuations of the prompt (prompt included), decoded to text."""
    if cfg.ckpt_path is None:
        raise ConfigError("ckpt_path is not set: give ckpt_path=<a run's .ckpt, its run dir, or a Hugging Face "
                          "directory>.")
    device = check_device("device", cfg.device)  # before the model is loaded: torch's own error is an assertion
    check_table("", {k: cfg.get(k) for k in SAMPLE}, SAMPLE)
    ignored_options(cfg, in_sweep_job=False, rules=SAMPLE_RULES, defaults=sampling_defaults())
    if not is_hf_directory(cfg.ckpt_path):
        cfg.ckpt_path = str(resolve_checkpoint(cfg.ckpt_path))  # a run dir: its newest checkpoint that loads
    model, trained_with = load_model(cfg.ckpt_path)
    model = model.to(device)
    tokenizer = load_tokenizer(cfg, trained_with)
    ids = tokenizer.encode(read_prompt(cfg))
    if not ids:
        given = f"prompt_file={cfg.prompt_file!r}" if cfg.prompt_file is not None else f"prompt={cfg.prompt!r}"
        raise ConfigError(f"{given} is empty; give at least one character, or drop {given.split('=')[0]} to start "
                          "a fresh document.")
    if max(ids) >= model.config.vocab_size:
        raise ConfigError(f"tokenizer {tokenizer.name} produced id {max(ids)}, but the model has "
                          f"vocab_size={model.config.vocab_size}; choose the tokenizer the model was trained with.")
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    idx = torch.tensor([ids] * cfg.num_samples, device=device)
    out = model.generate(
        idx, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
        num_beams=cfg.num_beams, eos_token_id=tokenizer.eot_id if cfg.stop_at_eot else None, generator=generator,
    )
    texts = []
    for row in out.tolist():
        if cfg.stop_at_eot and tokenizer.eot_id in row[len(ids) :]:  # drop the end-of-text and the padding after it
            row = row[: row.index(tokenizer.eot_id, len(ids))]
        texts.append(tokenizer.decode(row))
    return texts
