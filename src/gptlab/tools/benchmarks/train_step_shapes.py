"""The shapes scripts/bench_train.py times a training step at (gptlab.tools.benchmarks.train_step), apart from the
benchmark: its --shapes choices are read without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch: int
    vocab_size: int = 257  # the default run's byte tokenizer

    @property
    def label(self) -> str:
        return f"L{self.n_layer} H{self.n_head} E{self.n_embd} T{self.block_size} B{self.batch}"


SHAPES = {"nano": Shape(4, 4, 128, 128, 16), "wide": Shape(4, 12, 768, 256, 4)}
