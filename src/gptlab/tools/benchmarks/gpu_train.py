"""`scripts/bench_train.py --device cuda`: gptlab on a GPU, each ratio measured in this one process.

1. steps: one training step of GPT-2 small (bf16 autocast, fused AdamW, clip 1.0, dropout 0, T=1024, 50304 head
   rows) of gptlab's model against the hand-written reference (reference_gpt.py, nanoGPT's shape: loss inside its
   forward), eager and compiled, at each batch size asked for. Rounds interleave the contenders; each keeps its best.
   The reference runs with torch's own SDPA kernel priority, as a model written from scratch does; gptlab with the
   kernel its runtime measured fastest (runtime.attention_backend=auto). Memory: the step's allocator peak above
   what was allocated before it, plus the contender's own weights, gradients and Adam states.
2. fit: `train(cfg)` (Lightning, gptlab's callbacks, a 0.5M-token step by accumulation, validation and checkpoints)
   against a plain PyTorch loop doing the same steps with the same model function, data, optimizer, validations and
   checkpoints (last and best). Both are timed over the same window: from the end of the first validation (all
   compiling done) to the end of the run; "train" subtracts the validations and checkpoints inside it.
3. typed: `python src/train.py model=gpt2_small tokenizer=gpt2 trainer=gpu` as a user types it (fewer steps), its
   steady x_throughput/tokens_per_sec.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import lightning as L
import torch

from gptlab.config.schemas import Runtime
from gptlab.execution.parallelize import parallelize
from gptlab.execution.peak_flops import device_peak, mfu
from gptlab.lightning_internals import sdpa_priority_order
from gptlab.model import GPT, GPTConfig, training_flops_per_token
from gptlab.tools.benchmarks.reference_gpt import ReferenceGPT
from gptlab.train.optim import weight_decay_groups

GPT2_SMALL = dict(vocab_size=50257, pad_vocab_to=64, block_size=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.0)
GIB = 2**30


@dataclass
class Contender:
    step: Callable[[], torch.Tensor]
    first_loss: float
    state_bytes: int  # weights + gradients + Adam's two moments
    context: Callable[[], Any] = contextlib.nullcontext


@contextlib.contextmanager
def torch_default_sdpa() -> Iterator[None]:
    """SDPA's kernel priority as torch ships it (what a from-scratch model gets), whatever gptlab chose."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(TORCH_SDPA_ORDER, set_priority=True):
        yield


# torch's shipped priority, read at import, before gptlab's runtime puts its measured choice first.
TORCH_SDPA_ORDER = [torch.nn.attention.SDPBackend(b) for b in sdpa_priority_order()]


def contender(which: str, cfg: GPTConfig, batch: int, compile: bool, device: torch.device, seed: int = 0
              ) -> Contender:
    torch.manual_seed(seed)
    gpt = GPT(cfg).to(device)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)
    model: torch.nn.Module
    context: Callable[[], Any] = contextlib.nullcontext
    if which == "gptlab":
        model = gpt
        loss_fn = parallelize(gpt, Runtime(compile=compile), device)  # as a run applies it

        def loss() -> torch.Tensor:
            return loss_fn(x, y).objective
    else:
        model = ReferenceGPT(cfg.padded_vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd)
        model = model.to(device).load_from(gpt)
        del gpt
        forward = torch.compile(model, dynamic=False) if compile else model
        context = torch_default_sdpa

        def loss() -> torch.Tensor:
            return forward(x, y)

    params = list(model.parameters())
    optimizer = torch.optim.AdamW(weight_decay_groups(model, 0.1), lr=1e-4, weight_decay=0.1, fused=True)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            value = loss()
        value.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        return value.detach()

    with context(), torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        first = float(loss())
    state_bytes = sum(p.numel() * p.element_size() for p in params) * 4  # + grads + exp_avg + exp_avg_sq (fp32)
    return Contender(step, first, state_bytes, context)


def sync() -> None:
    """Wait for the GPU's queue (nothing on a CPU, where the same code runs in the tests at a tiny size)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(c: Contender, steps: int) -> float:
    sync()
    with c.context():
        start = time.perf_counter()
        for _ in range(steps):
            c.step()
        sync()
    return (time.perf_counter() - start) / steps


def _peak(c: Contender, device: torch.device) -> float:
    if device.type != "cuda":
        return float("nan")
    sync()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with c.context():
        c.step()
    sync()
    return torch.cuda.max_memory_allocated() - before + c.state_bytes


def bench_gpu_steps(device: torch.device, batches: list[int], steps: int, repeats: int, compiled: bool,
                    model: Optional[dict[str, Any]] = None) -> list[str]:
    cfg = GPTConfig(**(model or GPT2_SMALL))
    flops = training_flops_per_token(cfg)["total"]
    peak_flops, source = device_peak(device, "bf16-mixed")
    rows = [f"peak for MFU: {source}" + (f", {peak_flops / 1e12:.1f} TFLOP/s" if peak_flops else ""),
            "| step, GPT-2 small bf16 | who | ms/step | tokens/s | MFU | peak memory | vs reference |",
            "|---|---|---|---|---|---|---|"]
    for batch in batches:
        for comp in (False, True) if compiled else (False,):
            names = ("reference", "gptlab")
            contenders = {}
            for name in names:  # built and warmed one after another: each compiles under its own SDPA priority
                contenders[name] = contender(name, cfg, batch, comp, device)
                for _ in range(3):
                    with contenders[name].context():
                        contenders[name].step()
            losses = {n: c.first_loss for n, c in contenders.items()}
            # Equal work: the same weights and batch. The reference's softmax also spans the padding rows (at init
            # about log(padded / vocab) nats: 1e-3 for GPT-2) and bf16 rounds differently: agree within that.
            slack = math.log(cfg.padded_vocab_size / cfg.vocab_size) + 1e-2
            assert abs(losses["gptlab"] - losses["reference"]) < slack, losses
            best = {n: float("inf") for n in names}
            for _ in range(repeats):
                for n in names:
                    best[n] = min(best[n], _timed(contenders[n], steps))
            memory = {n: _peak(contenders[n], device) for n in names}
            label = f"B={batch}{' compiled' if comp else ' eager'}"
            for n in names:
                tps = batch * cfg.block_size / best[n]
                util = f"{mfu(tps, flops, peak_flops):.1%}" if peak_flops else "-"
                rows.append(f"| {label} | {n} | {best[n] * 1e3:.1f} | {tps:,.0f} | {util} | {memory[n] / GIB:.1f} GiB "
                            f"| {best['reference'] / best[n]:.2f}x, memory {memory[n] / memory['reference']:.2f}x |")
            del contenders
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


# Kernels both models call as libraries (cuBLAS/cuBLASLt GEMMs, CUTLASS, FlashAttention, cuDNN), by name: everything
# else in a compiled step is inductor's own generated code (Triton), where frameworks can differ.
LIBRARY_KERNELS = ("gemm", "nvjet", "xmma", "cutlass", "flash", "fmha", "cudnn", "attention")


def library_share(c: Contender, steps: int = 3) -> tuple[float, float, list[str]]:
    """(share of the step's GPU kernel time in LIBRARY_KERNELS, GPU ms per step, the 8 costliest kernels)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with c.context():
        c.step()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with c.context():
            for _ in range(steps):
                c.step()
        sync()
    kernels = [(e.key, e.self_device_time_total) for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    total = sum(t for _, t in kernels)
    library = sum(t for name, t in kernels if any(k in name.lower() for k in LIBRARY_KERNELS))
    top = [f"{t / total:6.1%} {name[:100]}" for name, t in sorted(kernels, key=lambda kv: -kv[1])[:8]]
    return library / total, total / steps / 1e3, top


def bench_bound(device: torch.device, batch: int, who: tuple[str, ...] = ("gptlab",)) -> list[str]:
    """What no framework around the same kernels can beat: the compiled step's time in library kernels."""
    cfg = GPTConfig(**GPT2_SMALL)
    rows = [f"| compiled step, GPT-2 small B={batch} | GPU kernel time | in matmul/attention libraries | bound |",
            "|---|---|---|---|"]
    tops = []
    for name in who:
        c = contender(name, cfg, batch, True, device)
        share, ms, top = library_share(c)
        tops += [f"{name}:", *top]
        halved = 1 / (1 - (1 - share) / 2)
        rows.append(f"| {name} | {ms:.1f} ms | {share:.1%} ({share * ms:.1f} ms) | generated kernels are "
                    f"{(1 - share) * ms:.1f} ms: a framework that halved them would be {halved:.2f}x |")
        del c
    return rows + ["", *tops]


class WindowClock(L.Callback):
    """Times a Lightning fit from the first training batch after its first validation and the checkpoints that
    validation wrote (all compiling done) to the end of training, and the validations and checkpoints inside."""

    def __init__(self) -> None:
        self.start: Optional[float] = None
        self.start_step = 0
        self.eval_seconds = 0.0
        self._eval_from: Optional[float] = None
        self._validated = False
        self.end = 0.0
        self.end_step = 0

    @staticmethod
    def _now() -> float:
        sync()
        return time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.start is not None:
            self._eval_from = self._now()

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self._eval_from is not None:  # the validation and the checkpoints after it are done
            self.eval_seconds += self._now() - self._eval_from
            self._eval_from = None
        elif self._validated and self.start is None:  # the first validation and its checkpoints are done
            self.start, self.start_step = self._now(), trainer.global_step

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validated = self._validated or not trainer.sanity_checking

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.end, self.end_step = self._now(), trainer.global_step
        if self._eval_from is not None:
            self.eval_seconds += self.end - self._eval_from
            self._eval_from = None


@dataclass
class Window:
    seconds: float
    eval_seconds: float
    steps: int

    def rates(self, tokens_per_step: int) -> tuple[float, float]:
        """(tokens/s over the whole window, tokens/s of its training steps alone)."""
        tokens = self.steps * tokens_per_step
        return tokens / self.seconds, tokens / (self.seconds - self.eval_seconds)


def fit_overrides(batch: int, steps: int, val_every: int) -> list[str]:
    tokens_per_step = 524288
    windows = steps * tokens_per_step // 1024 + 1024
    return ["model=gpt2_small", "tokenizer=gpt2", "trainer=gpu", "model.dropout=0.0", f"data.batch_size={batch}",
            f"global_batch_tokens={tokens_per_step}", f"data.samples_per_epoch={windows}",
            f"trainer.max_steps={steps}", f"trainer.val_check_interval={val_every}", "callbacks.text_samples=null",
            "trainer.limit_val_batches=4"]


def gptlab_fit_window(cfg: Any) -> Window:
    import gptlab.apps.build as build
    from gptlab.apps.train import train

    clock = WindowClock()
    original = build.build_callbacks
    build.build_callbacks = lambda c: [*original(c), clock]
    try:
        train(cfg)
    finally:
        build.build_callbacks = original
    assert clock.start is not None, "the fit never validated before its end: give more steps"
    return Window(clock.end - clock.start, clock.eval_seconds, clock.end_step - clock.start_step)


def plain_fit_window(cfg: Any, device: torch.device) -> Window:
    """The same run as a researcher writes it by hand: gptlab's model function, data and optimizer config."""
    import hydra

    from gptlab.preflight.early_checks import build_model_config

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    model = GPT(build_model_config(cfg.model, tokenizer.vocab_size)).to(device)
    loss_fn = parallelize(model, Runtime(compile=True), device)
    optimizer = torch.optim.AdamW(weight_decay_groups(model, cfg.optimizer.weight_decay), lr=cfg.optimizer.lr,
                                  betas=tuple(cfg.optimizer.betas), weight_decay=cfg.optimizer.weight_decay, fused=True)
    scheduler = hydra.utils.instantiate(cfg.scheduler)(optimizer, total_steps=cfg.trainer.max_steps)
    datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
    datamodule.setup("fit")
    accumulate = cfg.global_batch_tokens // (cfg.data.batch_size * model.config.block_size)
    params = list(model.parameters())
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    batches = iter(datamodule.train_dataloader())
    best = float("inf")
    start = eval_seconds = 0.0
    start_step = 0
    model.train()
    for step in range(1, cfg.trainer.max_steps + 1):
        for _ in range(accumulate):
            x, y = (t.to(device, non_blocking=True) for t in next(batches))
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(x, y).objective / accumulate
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.trainer.gradient_clip_val, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        if step % cfg.trainer.log_every_n_steps == 0:
            loss.item()
        if step % cfg.trainer.val_check_interval == 0 or step == cfg.trainer.max_steps:
            sync()
            began = time.perf_counter()
            model.eval()
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
                vals = [float(loss_fn(vx.to(device), vy.to(device)).ce) for i, (vx, vy) in
                        enumerate(datamodule.val_dataloader()) if i < cfg.trainer.limit_val_batches]
            model.train()
            val = sum(vals) / len(vals)
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            torch.save(state, out / "last.pt")
            if val < best:
                best = val
                torch.save(state, out / "best.pt")
            now = time.perf_counter()
            if not start:
                start, start_step = now, step
            else:
                eval_seconds += now - began
    sync()
    return Window(time.perf_counter() - start, eval_seconds, cfg.trainer.max_steps - start_step)


def bench_fit(conf_dir: Path, device: torch.device, batch: int, steps: int, val_every: int,
              overrides: Optional[list[str]] = None) -> list[str]:
    from gptlab.tools.benchmarks.fit import compose_train

    rows = ["| fit, GPT-2 small, 0.5M-token steps | who | tokens/s (window) | tokens/s (train steps) | vs loop |",
            "|---|---|---|---|---|"]
    overrides = overrides or fit_overrides(batch, steps, val_every)
    results = {}
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        cfg = compose_train(conf_dir, overrides, Path(tmp) / "plain")
        results["plain loop"] = plain_fit_window(cfg, device)
        results["gptlab (Lightning)"] = gptlab_fit_window(compose_train(conf_dir, overrides, Path(tmp) / "lit"))
    tokens_per_step = cfg.global_batch_tokens
    loop_wall, loop_train = results["plain loop"].rates(tokens_per_step)
    for name, window in results.items():
        wall, train = window.rates(tokens_per_step)
        rows.append(f"| B={batch}, {window.steps} steps in window | {name} | {wall:,.0f} | {train:,.0f} | "
                    f"{wall / loop_wall:.3f}x window, {train / loop_train:.3f}x train |")
    return rows


TYPED = ["model=gpt2_small", "tokenizer=gpt2", "trainer=gpu"]


def bench_typed(root: Path, steps: int, typed: tuple[str, ...] = tuple(TYPED)) -> list[str]:
    """The command as a user types it, in a subprocess (with max_steps, and samples_per_epoch so that the small
    built-in corpus reads like a large one); its last x_throughput/tokens_per_sec and MFU."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory(dir=".") as run:
        cmd = [sys.executable, str(root / "src" / "train.py"), *typed, f"trainer.max_steps={steps}",
               f"data.samples_per_epoch={steps * 64 + 64}", f"hydra.run.dir={run}"]
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            return [f"typed run failed ({done.returncode}): {done.stderr[-2000:]}"]
        events = sorted(Path(run).rglob("events.out.tfevents*"))
        acc = EventAccumulator(str(events[0].parent))
        acc.Reload()
        last = {tag: acc.Scalars(tag)[-1].value for tag in ("x_throughput/tokens_per_sec", "x_throughput/mfu")
                if tag in acc.Tags()["scalars"]}
        summary = json.loads((Path(run) / "run_summary.json").read_text())
        mfu_text = f"{last['x_throughput/mfu']:.1%}" if "x_throughput/mfu" in last else "-"
        return [f"| typed: `python src/train.py {' '.join(typed)}` | tokens/s | MFU | wall |",
                "|---|---|---|---|",
                f"| {steps} steps, {summary['parameters']:,} parameters | "
                f"{last.get('x_throughput/tokens_per_sec', float('nan')):,.0f} | {mfu_text} | "
                f"{time.perf_counter() - started:.0f} s |"]
