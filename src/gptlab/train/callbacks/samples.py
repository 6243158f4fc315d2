"""Generated text after every validation, in TensorBoard's text tab (and every other logger of the run that takes
text: `log_sample`, gptlab.train.run_loggers): the quickest sanity check of a run."""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only

from gptlab.execution.fsdp_strategy import shards_weights
from gptlab.model import GPT

log = logging.getLogger(__name__)


class TextSamples(L.Callback):
    """Continues each prompt with `max_new_tokens` sampled tokens (temperature 0 = greedy) and writes the
    texts under `samples/<i>`. Sampling runs in a forked RNG with a seed per step, so it neither disturbs
    training's random stream (exact resume) nor changes between reruns."""

    def __init__(
        self,
        prompts: Sequence[str] = ("\n", "The "),
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        top_k: Optional[int] = 40,
        seed: int = 0,
    ) -> None:
        self.prompts, self.max_new_tokens = list(prompts), max_new_tokens
        self.temperature, self.top_k, self.seed = temperature, top_k, seed

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Sampling runs on rank 0 alone, and under FSDP each rank holds only a shard of the weights.
        self._enabled = not shards_weights(trainer.strategy)
        if not self._enabled:
            log.warning("callbacks.text_samples is off under FSDP (the weights are sharded across ranks).")

    @rank_zero_only
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        writers = [lg for lg in trainer.loggers if hasattr(lg, "log_sample")]
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if not writers or tokenizer is None or trainer.sanity_checking or not getattr(self, "_enabled", True):
            return
        model: GPT = pl_module.model
        was_training = model.training
        model.eval()
        device = pl_module.device
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed + trainer.global_step)
            for i, prompt in enumerate(self.prompts):
                ids = tokenizer.encode(prompt) or [tokenizer.eot_id]
                idx = torch.tensor([ids[-model.config.block_size :]], dtype=torch.long, device=device)
                out = model.generate(idx, self.max_new_tokens, temperature=self.temperature, top_k=self.top_k)
                text = tokenizer.decode(out[0].tolist())
                for writer in writers:
                    writer.log_sample(f"samples/{i}", text, trainer.global_step)
        model.train(was_training)
