"""runtime.float8 against bf16 on one GPU: its loss parity and its speed (scripts/gpu_check.py's float8 part).

Parity: the doctor's check (gptlab.tools.doctor.float8_parity) with its rows: the same small model, init and
batches trained in bf16 autocast and with apply_float8; the final losses must agree within FLOAT8_PARITY of the
first loss. Speed: one training step (bf16 autocast, fused AdamW, the loss inside the compiled graph) of GPT-3 XL's
layer widths (D=2048, d_ff=8192, 24 heads of 128) with fewer layers, as a run builds it with
`parallelize(model, Runtime(compile=..., float8=...))`, bf16 against float8, best of interleaved rounds.
On a CPU (no float8 tensor cores) the bf16 halves run at a tiny size and float8's are skipped with
check_float8's reason.
"""

from __future__ import annotations

import time
from typing import Optional

import torch

from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.execution.float8 import check_float8, torchao_available
from gptlab.execution.parallelize import parallelize
from gptlab.model import GPT, GPTConfig
from gptlab.tools.doctor import FLOAT8_MODEL, FLOAT8_PARITY, float8_apart, float8_loss_curve

XL_LAYERS = dict(vocab_size=50257, pad_vocab_to=64, block_size=2048, n_layer=4, n_head=24, n_embd=2048,
                 head_dim=128, d_ff=8192, attn_pattern=["dense"], dropout=0.0)
TINY_LAYERS = dict(vocab_size=97, block_size=32, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
TINY_TASK = dict(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=32, dropout=0.0)


def float8_refusal(device: torch.device) -> Optional[str]:
    """Why float8 cannot run on `device` (check_float8's message), or None where it can."""
    on_gpu = device.type == "cuda"
    try:
        check_float8(torch.cuda.get_device_capability(device) if on_gpu else None, on_gpu and torchao_available(),
                     torch.cuda.get_device_name(device) if on_gpu else "this machine")
    except ConfigError as refusal:
        return str(refusal)
    return None


def parity_rows(device: torch.device, steps: int, tiny: bool = False) -> list[str]:
    """The loss curves' finals, bf16 against float8 (float8's cells say why where it cannot run)."""
    cfg = GPTConfig(**(TINY_TASK if tiny else FLOAT8_MODEL))
    refusal = float8_refusal(device)
    bf16, _ = float8_loss_curve(cfg, device, steps, False)
    rows = [f"| float8 loss parity, L{cfg.n_layer} D{cfg.n_embd} T{cfg.block_size}, {steps} steps | final loss "
            "(mean of last 20) | first loss | apart (share of first loss) | limit |", "|---|---|---|---|---|"]
    rows.append(f"| bf16 | {float8_apart(bf16, bf16)[0]:.4f} | {bf16[0]:.4f} | | |")
    if refusal:
        return [*rows, f"| float8 | skipped: {refusal} | | | |"]
    float8, converted = float8_loss_curve(cfg, device, steps, True)
    _, final, apart = float8_apart(bf16, float8)
    verdict = "ok" if apart <= FLOAT8_PARITY else "FAIL"
    return [*rows, f"| float8 ({len(converted)} Linear layers, head in bf16) | {final:.4f} | {float8[0]:.4f} | "
                   f"{apart:.2%} | {FLOAT8_PARITY:.0%}: {verdict} |"]


def _step(cfg: GPTConfig, batch: int, device: torch.device, float8: bool, compile: bool):
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    loss_fn = parallelize(model, Runtime(compile=compile, float8=float8), device)  # as a run applies it
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(x, x).objective
        loss.backward()
        optimizer.step()

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def speed_rows(device: torch.device, batch: int, steps: int, repeats: int, tiny: bool = False) -> list[str]:
    """ms per training step, bf16 against float8, compiled on a GPU (eager on a CPU, where float8 is skipped)."""
    cfg = GPTConfig(**(TINY_LAYERS if tiny else XL_LAYERS))
    compile = device.type == "cuda"
    refusal = float8_refusal(device)
    modes = {"bf16": False} if refusal else {"bf16": False, "float8": True}
    steppers = {name: _step(cfg, batch, device, float8, compile) for name, float8 in modes.items()}
    for step in steppers.values():  # compiles and allocates the optimizer state
        for _ in range(3):
            step()
    best = dict.fromkeys(steppers, float("inf"))
    for _ in range(repeats):
        for name, step in steppers.items():
            _sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            _sync(device)
            best[name] = min(best[name], (time.perf_counter() - start) / steps)
    label = (f"L{cfg.n_layer} D{cfg.n_embd} d_ff{cfg.d_ff} T{cfg.block_size} B{batch}"
             f"{' compiled' if compile else ' eager'}")
    rows = [f"| float8 speed, {label} | ms/step | tokens/s | vs bf16 |", "|---|---|---|---|"]
    for name, seconds in best.items():
        rows.append(f"| {name} | {seconds * 1e3:.1f} | {batch * cfg.block_size / seconds:,.0f} | "
                    f"{best['bf16'] / seconds:.2f}x |")
    return rows + ([f"| float8 | skipped: {refusal} | | |"] if refusal else [])
