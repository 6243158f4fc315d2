"""The sparse attention kernels against the dense, explicitly masked SDPA reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gptlab.errors import ConfigError
from gptlab.model.sparse_attention import attend, chunked_local, pattern_mask, pattern_pairs, resolve_impl

# (B, H, T, D_K, D_V, w): T not a multiple of w, w = 1, w >= T, D_K != D_V, several batch/head shapes.
SHAPES = [
    (2, 3, 100, 16, 24, 32),
    (1, 4, 64, 8, 8, 16),
    (3, 1, 37, 8, 4, 5),
    (1, 2, 33, 4, 4, 1),
    (2, 2, 50, 16, 8, 64),
    (2, 2, 50, 8, 8, 50),
]


def qkv(B: int, H: int, T: int, dk: int, dv: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, H, T, dk), (B, H, T, dk), (B, H, T, dv)]
    return tuple(torch.randn(s, generator=g).requires_grad_() for s in shapes)


def outputs_and_grads(q, k, v, fn) -> list[torch.Tensor]:
    out = fn(q, k, v)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return [out.detach(), *torch.autograd.grad(out, (q, k, v), upstream)]


def test_pattern_mask_matches_definition() -> None:
    T, w = 11, 3
    for kind, allowed in {
        "dense": lambda i, j: j <= i,
        "local": lambda i, j: i - w < j <= i,
        "strided": lambda i, j: j <= i and (i - j) % w == 0,
    }.items():
        expected = torch.tensor([[allowed(i, j) for j in range(T)] for i in range(T)])
        assert torch.equal(pattern_mask(kind, T, w), expected), kind


@pytest.mark.parametrize("kind", ["local", "strided"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}T{}dk{}dv{}w{}".format(*s))
def test_chunked_equals_sdpa_reference(kind: str, shape: tuple[int, ...]) -> None:
    B, H, T, dk, dv, w = shape
    q, k, v = qkv(B, H, T, dk, dv)
    ref = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind=kind, window=w, impl="sdpa"))
    got = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind=kind, window=w, impl="chunked"))
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5, msg=f"{kind} {name}")


def test_chunked_with_scale_and_odd_length() -> None:
    q, k, v = qkv(2, 3, 45, 8, 12)
    for kind in ("local", "strided"):
        def run(impl: str, kind: str = kind):
            return outputs_and_grads(q, k, v, lambda *t: attend(*t, kind=kind, window=8, impl=impl, scale=1.0))

        ref, got = run("sdpa"), run("chunked")
        for r, g in zip(ref, got):
            torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("T,w", [(40, 40), (40, 64), (1, 5)])
def test_local_with_wide_window_is_dense(T: int, w: int) -> None:
    q, k, v = qkv(2, 2, T, 8, 8)
    dense = outputs_and_grads(q, k, v, lambda *t: F.scaled_dot_product_attention(*t, is_causal=True))
    got = outputs_and_grads(q, k, v, lambda *t: chunked_local(*t, window=w, scale=None, dropout_p=0.0))
    for r, g in zip(dense, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


def test_local_differs_from_dense_when_window_is_short() -> None:
    """Guards the tests above against a kernel that silently computes dense attention."""
    q, k, v = qkv(1, 2, 40, 8, 8)
    dense = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    local = attend(q, k, v, "local", 8, "chunked")
    assert torch.allclose(local[:, :, :8], dense[:, :, :8], atol=1e-6)
    assert (local[:, :, 8:] - dense[:, :, 8:]).abs().max() > 1e-2


@pytest.mark.parametrize("impl", ["sdpa", "chunked"])
@pytest.mark.parametrize("kind", ["dense", "local", "strided"])
def test_outputs_depend_only_on_visible_keys(kind: str, impl: str) -> None:
    """Causality, and the band: changing key/value j moves output i only if the pattern lets i see j."""
    T, w = 23, 4
    q, k, v = (t.detach() for t in qkv(1, 2, T, 8, 8))
    base = attend(q, k, v, kind, w, impl)
    visible = pattern_mask(kind, T, w)
    for j in (0, 5, 11, 22):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, j] += 3.0
        v2[:, :, j] += 3.0
        moved = (attend(q, k2, v2, kind, w, impl) - base).abs().amax(dim=(0, 1, 3)) > 1e-6
        assert torch.equal(moved, visible[:, j]), f"key {j}"


def test_auto_choices() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_impl("auto", "dense", 8192, 256, cpu) == "dense"
    assert resolve_impl("chunked", "local", 200, 256, cpu) == "dense"  # w >= T: local is dense
    assert resolve_impl("auto", "local", 512, 256, cpu) == "sdpa"  # T < 3w: dense-shaped work is cheaper
    assert resolve_impl("auto", "local", 768, 256, cpu) == "chunked"
    assert resolve_impl("auto", "strided", 512, 256, cpu) == "chunked"
    assert resolve_impl("auto", "local", 8192, 256, cuda) == "flex"
    assert resolve_impl("auto", "strided", 8192, 256, cuda) == "chunked"  # measured faster than flex on an H100
    assert resolve_impl("flex", "local", 8192, 256, cpu) == "flex"


def test_flex_refuses_cpu_backward_by_naming_the_field() -> None:
    q, k, v = qkv(1, 2, 40, 8, 8)
    with pytest.raises(ConfigError, match="model.attn_impl=flex.*auto or chunked"):
        attend(q, k, v, "local", 8, "flex")


def test_flex_forward_on_cpu_equals_reference() -> None:
    """FlexAttention runs only forward on CPU (compiled, ~20 s here), so only forward is checked here."""
    q, k, v = (t.detach() for t in qkv(2, 3, 100, 16, 24))
    for kind in ("local", "strided"):
        ref = attend(q, k, v, kind, 32, "sdpa")
        with torch.no_grad():
            got = attend(q, k, v, kind, 32, "flex")
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5, msg=kind)


def test_chunked_trains_after_running_under_inference_mode() -> None:
    """Lightning validates under inference_mode; a mask cached there must still serve a training step."""
    q, k, v = qkv(2, 2, 29, 8, 8)
    with torch.inference_mode():
        attend(q, k, v, "local", 6, "chunked")
    attend(q, k, v, "local", 6, "chunked").sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("T,w,c", [(45, 8, 1), (45, 8, 3), (45, 8, 8), (64, 16, 4), (7, 16, 5)])
def test_chunked_local_is_exact_for_any_query_block(T: int, w: int, c: int) -> None:
    """Every query block size c (blocks straddling the start, a partial last block) gives the band's outputs
    and gradients, including blocks whose keys reach before position 0."""
    q, k, v = qkv(2, 3, T, 8, 6)
    ref = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind="local", window=w, impl="sdpa"))
    got = outputs_and_grads(q, k, v, lambda *t: chunked_local(*t, window=w, scale=None, dropout_p=0.0, query_block=c))
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


def _fake_flash_attn(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1)):
    """flash_attn.flash_attn_func as flash-attn documents it, on (B, T, H, D): query i sees keys
    i - window_size[0] .. i + window_size[1] (-1: unbounded), and none after i when causal."""
    T = q.shape[1]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    left, right = window_size
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=allowed, scale=softmax_scale)
    return out.transpose(1, 2)


@pytest.fixture
def fake_flash(monkeypatch):
    import sys
    import types

    from gptlab.model import sparse_attention

    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_func=_fake_flash_attn))
    sparse_attention.flash_available.cache_clear()
    yield
    sparse_attention.flash_available.cache_clear()


@pytest.mark.parametrize("T,w", [(64, 16), (45, 8), (33, 1), (50, 49)])
def test_flash_window_equals_sdpa_reference(fake_flash, T: int, w: int) -> None:
    """attn_impl=flash hands flash-attn the band as window_size=(w - 1, 0), in its (B, T, H, D) layout."""
    q, k, v = qkv(2, 3, T, 8, 8)
    ref = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind="local", window=w, impl="sdpa"))
    got = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind="local", window=w, impl="flash"))
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5, msg=name)


def test_auto_prefers_flash_window_on_gpu_where_installed(fake_flash) -> None:
    cuda = torch.device("cuda")
    assert resolve_impl("auto", "local", 8192, 256, cuda, torch.bfloat16) == "flash"
    assert resolve_impl("auto", "local", 8192, 256, cuda, torch.float32) == "flex"  # flash-attn has no fp32
    assert resolve_impl("auto", "strided", 8192, 256, cuda, torch.bfloat16) == "chunked"
    assert resolve_impl("auto", "local", 8192, 256, torch.device("cpu"), torch.bfloat16) == "chunked"


def test_flash_refuses_what_it_cannot_compute(fake_flash) -> None:
    q, k, v = qkv(1, 2, 40, 8, 8)
    with pytest.raises(ConfigError, match="model.attn_impl=flash computes local layers only"):
        attend(q, k, v, "strided", 8, "flash")
    q, k, v = qkv(1, 2, 40, 8, 4)
    with pytest.raises(ConfigError, match="model.attn_impl=flash cannot compute attention with D_K != D_V"):
        attend(q, k, v, "local", 8, "flash")


def test_flash_without_the_package_says_how_to_get_it(monkeypatch) -> None:
    import sys

    from gptlab.model import sparse_attention

    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import flash_attn raises ImportError
    sparse_attention.flash_available.cache_clear()
    try:
        q, k, v = qkv(1, 2, 40, 8, 8)
        with pytest.raises(ConfigError, match="pip install flash-attn"):
            attend(q, k, v, "local", 8, "flash")
        assert resolve_impl("auto", "local", 8192, 256, torch.device("cuda"), torch.bfloat16) == "flex"
    finally:
        sparse_attention.flash_available.cache_clear()


@pytest.mark.parametrize("kind", ["dense", "local", "strided"])
@pytest.mark.parametrize("T,w", [(1, 4), (7, 3), (64, 16), (100, 7), (20, 20), (20, 30)])
def test_pattern_pairs_counts_the_mask(kind: str, T: int, w: int) -> None:
    """The FLOPs bound the benchmark prints (dense pairs / the kind's pairs) counts exactly the allowed pairs."""
    assert pattern_pairs(kind, T, w) == int(pattern_mask(kind, T, w).sum())


def test_compiled_kernels_read_their_masks_instead_of_rebuilding_them() -> None:
    """Under torch.compile (runtime.compile) a training call stores the chunked kernel's band mask once; the
    graphs after it read the stored mask, where a functools cache was traced through and rebuilt it every call."""
    import torch._dynamo

    from gptlab.model import sparse_attention

    graphs = []

    def record(gm, example_inputs):  # a dynamo backend that keeps each graph and runs it as traced
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    sparse_attention._SHAPE_CACHE.clear()
    fn = torch.compile(lambda q, k, v: attend(q, k, v, "local", 6, "chunked"), backend=record, fullgraph=True)
    q, k, v = qkv(1, 2, 29, 8, 8)
    for _ in range(3):
        fn(q, k, v).sum().backward()
    torch._dynamo.reset()
    ops = [str(node.target) for node in graphs[-1].graph.nodes]
    assert not [op for op in ops if "masked_fill" in op or "arange" in op], ops
    assert len(graphs) == 2  # the first call builds and stores the mask; one recompile reads it
    ref = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind="local", window=6, impl="sdpa"))
    got = outputs_and_grads(q, k, v, fn)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}T{}dk{}dv{}w{}".format(*s))
def test_local_block_pairs_equal_sdpa_reference(shape: tuple[int, ...]) -> None:
    """The CUDA form of chunked local (blocks of w against [previous block, own block], one shared mask), run here
    on CPU: the band's outputs and gradients, with T not a multiple of w, w = 1 and w >= T among the shapes."""
    from gptlab.model.sparse_attention import local_block_pairs

    B, H, T, dk, dv, w = shape
    q, k, v = qkv(B, H, T, dk, dv)
    ref = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind="local", window=w, impl="sdpa"))
    got = outputs_and_grads(q, k, v, lambda *t: local_block_pairs(*t, window=w, scale=None, dropout_p=0.0))
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5, msg=name)


def test_local_block_pairs_with_alibi_bias_and_scale() -> None:
    from gptlab.model.alibi import ALiBi
    from gptlab.model.sparse_attention import local_block_pairs

    q, k, v = qkv(2, 4, 45, 8, 8)
    bias = ALiBi(4)
    ref = outputs_and_grads(q, k, v, lambda *t: attend(*t, kind="local", window=8, impl="sdpa", scale=0.5, bias=bias))
    got = outputs_and_grads(q, k, v, lambda *t: local_block_pairs(*t, window=8, scale=0.5, dropout_p=0.0, bias=bias))
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)
