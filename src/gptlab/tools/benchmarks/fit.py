"""gptlab's Lightning fit vs the same work in a plain PyTorch loop: what the framework costs.

The plain loop is what a researcher writes by hand for the same run: gptlab's GPT and CorpusDataModule, the
config's optimizer (with the same weight-decay groups), lr schedule, gradient clipping, max_steps, a validation
pass over the same val windows every val_check_interval steps followed by a checkpoint (model + optimizer), and
the loss read to the host every log_every_n_steps. gptlab's side is `train(cfg)`, the default run as a user gets
it (TensorBoard, progress bar, checkpoints, text samples, throughput); its time is run_summary.json's
fit_seconds, and the loop's is measured over the same span (data setup included in both).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import hydra
import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

import gptlab.config  # noqa: F401  (registers the schemas conf/train.yaml names)
from gptlab.apps.train import train
from gptlab.model import GPT, next_token_loss
from gptlab.preflight.early_checks import build_model_config
from gptlab.runs.run_dir import SUMMARY_FILE
from gptlab.train.optim import weight_decay_groups


def compose_train(conf_dir: Path, overrides: list[str], output_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base="1.3"):
            return compose(config_name="train", overrides=[*overrides, f"paths.output_dir={output_dir}"])
    finally:
        GlobalHydra.instance().clear()


def gptlab_fit(cfg: DictConfig) -> float:
    train(cfg)
    return json.loads((Path(cfg.paths.output_dir) / SUMMARY_FILE).read_text())["fit_seconds"]


def plain_fit(cfg: DictConfig) -> float:
    L.seed_everything(cfg.seed, workers=True)
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model = GPT(build_model_config(cfg.model, tokenizer.vocab_size))
    weight_decay = cfg.optimizer.get("weight_decay", 0.0)
    optimizer = hydra.utils.instantiate(cfg.optimizer)(weight_decay_groups(model, weight_decay))
    scheduler = hydra.utils.instantiate(cfg.scheduler)(optimizer, total_steps=cfg.trainer.max_steps)
    params = list(model.parameters())
    checkpoint = Path(cfg.paths.output_dir) / "plain.pt"
    started = time.perf_counter()
    datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    batches = iter(loader)
    model.train()
    for step in range(1, cfg.trainer.max_steps + 1):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        loss = next_token_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.trainer.gradient_clip_val)
        optimizer.step()
        scheduler.step()
        if step % cfg.trainer.log_every_n_steps == 0:
            loss.item()
        if step % cfg.trainer.val_check_interval == 0:
            model.eval()
            with torch.no_grad():
                total = sum(next_token_loss(model(vx), vy) * vx.numel() for vx, vy in datamodule.val_dataloader())
            model.train()
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "val": float(total)}
            torch.save(state, checkpoint)
    return time.perf_counter() - started


def compare_fit(conf_dir: Path, overrides: list[str], repeats: int, noise: bool = False) -> dict[str, float]:
    """Best-of-`repeats` seconds of each, runs interleaved, each in a fresh run dir. `noise`: a second plain loop
    ("plain again") runs in every round too, so plain / plain again is what this machine's load alone makes of two
    equal runs: a ratio inside that bound is no difference this run can resolve."""
    contenders = [("gptlab", gptlab_fit), ("plain", plain_fit)] + [("plain again", plain_fit)] * noise
    best = {name: float("inf") for name, _ in contenders}
    for _ in range(repeats):
        for name, fit in contenders:
            with tempfile.TemporaryDirectory() as run_dir:
                best[name] = min(best[name], fit(compose_train(conf_dir, overrides, Path(run_dir))))
    return best


# One layer, 32 wide, 2 x 32 tokens: a step of ~1 ms on a CPU, so the per-step framework cost stands out.
TINY_STEP_MODEL = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.block_size=32", "data.batch_size=2"]


def step_cost(conf_dir: Path, steps: int, repeats: int) -> dict[str, float]:
    """Best-of-`repeats` seconds per step of gptlab's fit and the plain loop on the tiny model (one validation and
    checkpoint, at the end, in both); gptlab's default callbacks and logger stay on."""
    overrides = [*TINY_STEP_MODEL, f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}",
                 "trainer.accelerator=cpu"]
    return {name: seconds / steps for name, seconds in compare_fit(conf_dir, overrides, repeats).items()}
