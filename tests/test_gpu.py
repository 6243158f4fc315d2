"""What only a GPU can check (marked `gpu`: skipped with the reason where CUDA is missing): FlexAttention's
backward against the sdpa reference, a bf16-mixed step against fp32, torch.compile on CUDA, and the doctor."""

from __future__ import annotations

import pytest
import torch

from gptlab.model import GPT, GPTConfig, next_token_loss
from gptlab.model.sparse_attention import attend

pytestmark = pytest.mark.gpu
CFG = dict(vocab_size=97, block_size=64, n_layer=2, n_head=4, n_embd=64)


@pytest.mark.parametrize("kind", ["local", "strided"])
def test_flex_forward_and_backward_match_sdpa(kind: str) -> None:
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", generator=gen, requires_grad=True) for _ in range(3))
    grad = torch.randn(2, 4, 1024, 64, device="cuda", generator=gen)
    results = []
    for impl in ("sdpa", "flex", "chunked"):
        out = attend(q, k, v, kind, 128, impl)
        results.append([out.detach()] + list(torch.autograd.grad(out, (q, k, v), grad)))
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4)


def test_bf16_mixed_step_tracks_fp32() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG)).cuda()
    x = torch.randint(0, 97, (4, 64), device="cuda")
    fp32 = next_token_loss(model(x), x)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bf16 = next_token_loss(model(x), x)
    assert bf16.dtype == torch.float32  # the loss is computed in fp32 from bf16 logits
    assert abs(float(bf16) - float(fp32)) < 2e-2
    bf16.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_compiled_model_matches_eager_on_cuda() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG, attn_pattern=["dense", "local"], attn_window=16)).cuda()
    x = torch.randint(0, 97, (4, 64), device="cuda")
    compiled = torch.compile(model, dynamic=False)
    torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


def test_doctor_runs_the_gpu_half() -> None:
    from gptlab.tools.doctor import run

    report = run(attention_T=1024, repeats=1)
    assert not report.failed, report.table()
    assert any("compiled" in row[0] for row in report.rows)


def test_compiled_flex_model_trains_like_eager_sdpa_without_cache_warnings() -> None:
    """runtime.compile=true with attn_impl=flex: one graph with the block mask inside, no dynamo cache warnings."""
    import warnings

    torch.manual_seed(0)
    cfg = dict(CFG, attn_pattern=["dense", "local"], attn_window=16)
    reference = GPT(GPTConfig(**cfg, attn_impl="sdpa")).cuda()
    flex = GPT(GPTConfig(**cfg, attn_impl="flex")).cuda()
    flex.load_state_dict(reference.state_dict())
    x = torch.randint(0, 97, (4, 64), device="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = next_token_loss(torch.compile(flex, dynamic=False)(x), x)
        loss.backward()
    assert not [w for w in caught if "lru_cache" in str(w.message)], [str(w.message) for w in caught]
    expected = next_token_loss(reference(x), x)
    expected.backward()
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-4)
    for (name, a), b in zip(flex.named_parameters(), reference.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-3, msg=name)


def test_attention_backend_auto_puts_the_measured_fastest_first() -> None:
    """runtime.attention_backend=auto: each exact kernel is timed at the model's shape and the fastest leads SDPA's
    priority; the model's outputs are the same whichever runs."""
    from torch.nn.attention import SDPBackend

    from gptlab.execution.attention_backend import BACKENDS, choose_attention_backend, fastest_backend

    device = torch.device("cuda")
    best, times = fastest_backend(12, 1024, 64, device)
    assert best in times and times[best] == min(times.values())
    assert choose_attention_backend("auto", 12, 1024, 64, device) in times
    assert SDPBackend(torch._C._get_sdp_priority_order()[0]) in BACKENDS.values()
    model = GPT(GPTConfig(**CFG)).cuda()
    x = torch.randint(0, 97, (4, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outputs = []
        for name in times:
            choose_attention_backend(name, 4, 64, 16, device)
            outputs.append(model(x).float())
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], atol=3e-2, rtol=3e-2)


def test_compiled_model_and_loss_on_cuda_match_eager_and_keep_no_fp32_logits() -> None:
    """The GPU fast path's one graph (execution/parallelize.py): the same loss and gradients as eager, and a memory
    peak below eager's, whose loss holds an fp32 copy of the logits."""
    from gptlab.config.schemas import Runtime
    from gptlab.execution.parallelize import parallelize
    from gptlab.model.loss import model_loss

    cfg = GPTConfig(vocab_size=50257, pad_vocab_to=64, block_size=256, n_layer=2, n_head=4, n_embd=128)
    torch.manual_seed(0)
    eager, fast = GPT(cfg).cuda(), GPT(cfg).cuda()
    fast.load_state_dict(eager.state_dict())
    loss_fn = parallelize(fast, Runtime(compile=True), torch.device("cuda"))
    x = torch.randint(0, 50257, (16, 256), device="cuda")
    peaks = []
    for run in (lambda: model_loss(eager, x, x).objective, lambda: loss_fn(x, x).objective):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run()
        loss.backward()
        torch.cuda.synchronize()
        peaks.append((torch.cuda.max_memory_allocated() - before, float(loss)))
    assert abs(peaks[0][1] - peaks[1][1]) < 1e-2
    assert peaks[1][0] < peaks[0][0]
    for a, b in zip(eager.parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=2e-2, rtol=5e-2)


def test_flash_window_matches_sdpa_in_bf16() -> None:
    """attn_impl=flash (flash-attn's window_size) against the masked reference, where flash-attn is installed."""
    pytest.importorskip("flash_attn", reason="flash-attn is optional (pip install flash-attn)")
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", dtype=torch.bfloat16, generator=gen, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(2, 4, 1024, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    results = []
    for impl in ("sdpa", "flash"):
        out = attend(q, k, v, "local", 128, impl)
        results.append([out.detach().float()] + [g.float() for g in torch.autograd.grad(out, (q, k, v), grad)])
    for a, b in zip(*results):
        assert ((a - b).abs().max() / b.abs().max()).item() < 2e-2
