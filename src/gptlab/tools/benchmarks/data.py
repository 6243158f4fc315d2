"""Data pipeline throughput (scripts/bench_data.py): prepare rates and loader rates against what training consumes."""

import tempfile
import time
from itertools import islice
from pathlib import Path

import hydra
import torch
from hydra import compose, initialize_config_dir

import gptlab.config  # noqa: F401  (registers the schemas conf/train.yaml names)
from gptlab.data import GPTDataModule
from gptlab.data.prepare import prepare
from gptlab.data.ranks import fetch_gpt2_ranks
from gptlab.data.sources import BuiltinSource
from gptlab.data.tokenizers import TiktokenTokenizer
from gptlab.model import GPT, next_token_loss
from gptlab.preflight.early_checks import build_model_config

REPO = Path(__file__).resolve().parents[4]  # the checkout: conf/ and data/cache/ live there


def bench_prepare(tokenizer, root: Path) -> dict[int, float]:
    rates = {}
    for num_proc in (1, 2):
        start = time.perf_counter()
        source = BuiltinSource("python_stdlib")
        manifest = prepare(source, tokenizer, root / f"np{num_proc}", num_proc=num_proc, progress=False)
        tokens = manifest["splits"]["train"]["tokens"] + manifest["splits"]["val"]["tokens"]
        rates[num_proc] = tokens / (time.perf_counter() - start)
    return rates


def consumed_tokens_per_s(cfg, steps: int) -> float:
    """Training steps (forward, backward, AdamW) of the default model on random ids of the default shape."""
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model = GPT(build_model_config(cfg.model, tokenizer.vocab_size))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, tokenizer.vocab_size, (cfg.data.batch_size, cfg.model.block_size))
    for i in range(steps + 2):
        if i == 2:
            start = time.perf_counter()
        loss = next_token_loss(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return steps * x.numel() / (time.perf_counter() - start)


def loader_tokens_per_s(loader, batches: int) -> float:
    it = iter(loader)
    next(it)  # start-up (workers, first read) is not throughput
    start, tokens = time.perf_counter(), 0
    for batch in islice(it, batches):
        tokens += batch[0].numel()
    return tokens / (time.perf_counter() - start)


def main(steps: int, batches: int) -> None:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="train")
    block, batch = cfg.model.block_size, cfg.data.batch_size
    gpt2 = TiktokenTokenizer("gpt2", ranks_file=str(fetch_gpt2_ranks(REPO / "data" / "cache" / "tiktoken")))

    with tempfile.TemporaryDirectory() as tmp:
        rates = bench_prepare(gpt2, Path(tmp))
        print(f"prepare python_stdlib, gpt2: num_proc=1 {rates[1]:,.0f} tok/s | num_proc=2 {rates[2]:,.0f} tok/s "
              f"| speed-up {rates[2] / rates[1]:.2f}x")

        consumed = consumed_tokens_per_s(cfg, steps)
        print(f"default model ({cfg.model.n_layer} layers, d={cfg.model.n_embd}, batch {batch}x{block}) consumes "
              f"{consumed:,.0f} tok/s")
        tokenizer = hydra.utils.instantiate(cfg.tokenizer)
        default = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)  # pydocs in memory, as src/train.py
        stdlib = BuiltinSource("python_stdlib")
        shards = GPTDataModule(gpt2, stdlib, "prepared", block, batch, cache_dir=str(Path(tmp) / "np1"))
        streaming = GPTDataModule(gpt2, stdlib, "streaming", block, batch)
        for name, dm in (("pydocs (default)", default), ("gpt2 shards, memmap", shards), ("gpt2 streaming", streaming)):
            dm.setup("fit")
            rate = loader_tokens_per_s(dm.train_dataloader(), batches)
            print(f"loader {name:20s} {rate:14,.0f} tok/s = {rate / consumed:8.1f}x what training consumes")
