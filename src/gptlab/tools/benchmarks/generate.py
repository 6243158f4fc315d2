"""Decode speed of GPT.generate with and without the KV cache, and of transformers' generate on the same weights.

Every contender decodes the same prompt greedily, so their tokens must agree; the report says whether they do.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable

import torch
from omegaconf import DictConfig, OmegaConf

from gptlab.config.ranges import check_table, optional, positive_int, seed
from gptlab.errors import ConfigError
from gptlab.interop import save_pretrained
from gptlab.model import GPT, GPTConfig
from gptlab.preflight.devices import check_device

# conf/bench_generate.yaml's own keys (the model's are GPTConfig's checks)
CHECKS = {"prompt_len": positive_int, "new_tokens": positive_int, "batch": positive_int, "repeats": positive_int,
          "seed": seed, "threads": optional(positive_int)}


def _timed(fn: Callable[[], torch.Tensor], device: torch.device) -> tuple[float, torch.Tensor]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def run(cfg: DictConfig) -> dict[str, Any]:
    """Tokens/s per contender and the cache's speed-up; decodes cfg.new_tokens greedy tokens per row."""
    check_table("", cfg, CHECKS)
    device = check_device("device", cfg.device)
    model_cfg = GPTConfig.from_dict(OmegaConf.to_container(cfg.model, resolve=True))
    if cfg.prompt_len + cfg.new_tokens > model_cfg.block_size:
        raise ConfigError(f"prompt_len={cfg.prompt_len} + new_tokens={cfg.new_tokens} must fit "
                          f"model.block_size={model_cfg.block_size}; use e.g. "
                          f"new_tokens={max(1, model_cfg.block_size - cfg.prompt_len)}.")
    from transformers import AutoModelForCausalLM  # optional dependency, only for the reference

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model = GPT(model_cfg).eval()
    with tempfile.TemporaryDirectory() as tmp:  # the same weights, through the export path
        save_pretrained(model, tmp)
        hf = AutoModelForCausalLM.from_pretrained(tmp).eval().to(device)
    model.to(device)
    prompt = torch.randint(0, model_cfg.vocab_size, (cfg.batch, cfg.prompt_len), device=device)
    n = cfg.new_tokens

    def hf_generate(tokens: int) -> torch.Tensor:
        with torch.no_grad():
            return hf.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                               eos_token_id=None, pad_token_id=0, attention_mask=torch.ones_like(prompt))

    contenders = {
        "gptlab, KV cache": lambda t: model.generate(prompt, t, temperature=0, use_cache=True),
        "gptlab, no cache": lambda t: model.generate(prompt, t, temperature=0, use_cache=False),
        "transformers generate": hf_generate,
    }
    for fn in contenders.values():
        fn(8)  # warm-up: allocator, kernels, lazy init
    best: dict[str, float] = {}
    outputs: dict[str, torch.Tensor] = {}
    # Round-robin repeats, best time each: on a shared machine the load changes during a run, and taking
    # the contenders one after another would hand one of them all of a quiet (or busy) spell.
    for _ in range(cfg.repeats):
        for name, fn in contenders.items():
            seconds, out = _timed(lambda fn=fn: fn(n), device)
            best[name] = min(seconds, best.get(name, float("inf")))
            outputs[name] = out.cpu()
    results: dict[str, Any] = {"tokens_per_s": {k: cfg.batch * n / v for k, v in best.items()}, "outputs": outputs}
    outs = list(results["outputs"].values())
    results["same_tokens"] = all(torch.equal(outs[0], o) for o in outs[1:])
    return results


def report(cfg: DictConfig, results: dict[str, Any]) -> str:
    speed = results["tokens_per_s"]
    cache = speed["gptlab, KV cache"]
    lines = [f"greedy decoding, {cfg.new_tokens} new tokens after {cfg.prompt_len}, batch {cfg.batch}, "
             f"best of {cfg.repeats}, "
             f"{cfg.model.n_layer} layers of D={cfg.model.n_embd}, H={cfg.model.n_head}, d={cfg.model.vocab_size}, "
             f"{cfg.device}, {torch.get_num_threads()} threads"]
    for name, value in speed.items():
        lines.append(f"{name:<24}{value:>10.1f} tokens/s   KV cache is {cache / value:5.2f}x this")
    lines.append(f"identical tokens across all three: {'yes' if results['same_tokens'] else 'NO'}")
    return "\n".join(lines)
