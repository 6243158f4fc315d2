"""Data pipeline throughput, as ratios measured in one run (CPU shared, so only ratios are comparable):

1. prepare: python_stdlib with the GPT-2 tokenizer at num_proc 1 and 2 (tokens/s);
2. loaders: batches/s of the default pydocs loader, the memmapped shard loader and the streaming loader,
   against the tokens/s the default model (`python src/train.py`) consumes in training steps. Goal: >= 100x.

Usage: python scripts/bench_data.py [--steps 20] [--batches 300]
"""

import argparse
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import hydra  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from gptlab.data import CorpusDataModule, TokenDataModule  # noqa: E402
from gptlab.data.prepare import prepare  # noqa: E402
from gptlab.data.ranks import fetch_gpt2_ranks  # noqa: E402
from gptlab.data.sources import BuiltinSource  # noqa: E402
from gptlab.data.tokenizers import TiktokenTokenizer  # noqa: E402
from gptlab.model import GPT, next_token_loss  # noqa: E402
from gptlab.training import build_model_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps timed for the consumption rate")
    parser.add_argument("--batches", type=int, default=300, help="batches timed per loader")
    args = parser.parse_args()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="train")
    block, batch = cfg.model.block_size, cfg.data.batch_size
    gpt2 = TiktokenTokenizer("gpt2", ranks_file=str(fetch_gpt2_ranks(REPO / "data" / "cache" / "tiktoken")))

    with tempfile.TemporaryDirectory() as tmp:
        rates = bench_prepare(gpt2, Path(tmp))
        print(f"prepare python_stdlib, gpt2: num_proc=1 {rates[1]:,.0f} tok/s | num_proc=2 {rates[2]:,.0f} tok/s "
              f"| speed-up {rates[2] / rates[1]:.2f}x")

        consumed = consumed_tokens_per_s(cfg, args.steps)
        print(f"default model ({cfg.model.n_layer} layers, d={cfg.model.n_embd}, batch {batch}x{block}) consumes "
              f"{consumed:,.0f} tok/s")
        tokenizer = hydra.utils.instantiate(cfg.tokenizer)
        default = CorpusDataModule(tokenizer, block_size=block, batch_size=batch)
        shards = TokenDataModule(gpt2, BuiltinSource("python_stdlib"), block_size=block, batch_size=batch,
                                 cache_dir=str(Path(tmp) / "np1"))
        streaming = TokenDataModule(gpt2, BuiltinSource("python_stdlib"), block_size=block, batch_size=batch,
                                    streaming=True)
        for name, dm in (("pydocs (default)", default), ("gpt2 shards, memmap", shards), ("gpt2 streaming", streaming)):
            dm.setup("fit")
            rate = loader_tokens_per_s(dm.train_dataloader(), args.batches)
            print(f"loader {name:20s} {rate:14,.0f} tok/s = {rate / consumed:8.1f}x what training consumes")


if __name__ == "__main__":
    main()
