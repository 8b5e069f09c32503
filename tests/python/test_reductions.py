"""Reductions (sum, mean, amax, amin over any dims, keepdim, dtype=, out=), softmax and
log_softmax (any dim), dtype conversion and contiguous on the device, against the CPU
and without falling back."""

import pytest
import torch
from torch.testing import assert_close

from test_pointwise import FLOATS, check, rand

SHAPES_AND_DIMS = [
    ((1,), None), ((7,), 0), ((1000,), None), ((4097,), -1),
    ((5, 4097), 1), ((4097, 5), 0), ((3, 4, 5), (0, 2)), ((3, 4, 5), (1,)), ((6, 7, 8), (0, 1, 2)),
    ((2, 3, 4, 5), (1, 3)), ((), None), ((), 0),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape,dims", SHAPES_AND_DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_any_dims(dtype, shape, dims, keepdim):
    x = rand(shape, dtype, 1)
    sums_tol = dict(atol=1e-2, rtol=1e-2) if dtype != torch.float32 else dict(atol=1e-4, rtol=1e-5)
    for op in (torch.sum, torch.mean):
        torch.spyre.reset_fallback_counts()
        if dims is None:
            got, want = op(x.to("spyre")), op(x)
        else:
            got, want = op(x.to("spyre"), dims, keepdim), op(x, dims, keepdim)
        # fp32 accumulation on the device; the CPU's own order differs (cascade sums).
        assert_close(got.cpu(), want, **sums_tol)
        assert torch.spyre.fallback_counts() == {}
    for op in (torch.amax, torch.amin):
        d = () if dims is None else dims
        check(lambda t: op(t, d, keepdim), x)


def test_reductions_of_views_dtypes_and_out():
    x = rand((40, 30), torch.float16, 2)
    check(lambda t: t.t().sum(0), x)                      # a transposed view
    check(lambda t: t[::3, 1::2].amax(1, keepdim=True), x)  # a strided slice
    assert_close(x.to("spyre").sum(1, dtype=torch.float32).cpu(), x.sum(1, dtype=torch.float32))
    i = rand((9, 31), torch.int32, 3)
    check(lambda t: t.amax(0), i)
    check(lambda t: t.amin(), i)
    out = torch.empty(0, device="spyre")
    torch.mean(x.float().to("spyre"), 0, out=out)
    assert_close(out.cpu(), x.float().mean(0))
    torch.spyre.reset_fallback_counts()
    assert torch.equal(i.to("spyre").sum(1).cpu(), i.sum(1))  # int32 sums are int64: the CPU's
    assert torch.spyre.fallback_counts() == {"aten::sum": 1}


def test_reductions_of_zero_size_tensors():
    x = torch.empty(3, 0)
    check(lambda t: t.sum(1), x)
    check(lambda t: t.sum(0), x)
    check(lambda t: t.mean(1), x)
    check(lambda t: t.amax(0), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 1000), 1), ((4097, 3), 0), ((2, 5, 33), 1), ((1,), 0),
                                       ((), 0), ((0, 4), 1)], ids=str)
def test_softmax_and_log_softmax(dtype, shape, dim):
    x = rand(shape, dtype, 4) * 4
    # The reference computes in fp32 and rounds once, as the device does: PyTorch's CPU
    # kernels for fp16/bf16 round x - max to the dtype first (log_softmax of a bf16
    # row's largest element came out 15 ulps from the exact value on the CPU, 1 on the
    # device).
    for op in (torch.softmax, torch.log_softmax):
        torch.spyre.reset_fallback_counts()
        got = op(x.to("spyre"), dim)
        assert torch.spyre.fallback_counts() == {}
        assert got.dtype == dtype and got.shape == x.shape
        assert_close(got.cpu(), op(x.float(), dim).to(dtype))
    if dtype == torch.float16:  # half_to_float (the CPU has no such kernel)
        got = torch._softmax(x.to("spyre"), dim, True)
        assert got.dtype == torch.float32
        assert_close(got.cpu(), torch.softmax(x.float(), dim))


def test_softmax_out_and_views():
    x = rand((64, 50), torch.float32, 5)
    check(lambda t: torch.softmax(t.t(), -1), x)
    out = torch.empty(64, 50, device="spyre")
    torch._log_softmax(x.to("spyre"), 1, False, out=out)
    assert_close(out.cpu(), torch.log_softmax(x, 1))


CASTS = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.bool]


@pytest.mark.parametrize("src", CASTS, ids=str)
@pytest.mark.parametrize("dst", CASTS, ids=str)
@pytest.mark.parametrize("n", [1, 7, 1000, 4097])
def test_dtype_conversion_and_contiguous_on_the_device(src, dst, n):
    x = (rand((33, n), torch.float32, 6) * 40).to(src)
    check(lambda t: t.to(dst), x)
    check(lambda t: t.t().to(dst), x)
    check(lambda t: t.t().contiguous(), x)
    check(lambda t: t[1::2, ::3].contiguous(), x)
    torch.spyre.reset_fallback_counts()
    d = torch.empty(n, 33, dtype=dst, device="spyre")
    d.copy_(x.to("spyre").t())           # copy_ between dtypes and layouts
    assert torch.equal(d.cpu(), x.t().to(dst))
    e = torch.zeros(33, 2 * n, dtype=dst, device="spyre")
    e[:, ::2].copy_(x.to("spyre")[0])     # broadcast source into a strided destination
    want = torch.zeros(33, 2 * n, dtype=dst)
    want[:, ::2].copy_(x[0])
    assert torch.equal(e.cpu(), want)
    check(lambda t: t[0, 0].to(dst), x)   # 0-d
    check(lambda t: t[:, :0].to(dst), x)  # zero-size
    assert torch.spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape,normalized", [((7,), 1), ((3, 1000), 1), ((4097, 3), 1), ((2, 5, 33), 2),
                                              ((1, 1), 1), ((0, 4), 1)], ids=str)
@pytest.mark.parametrize("affine", ["weight+bias", "weight", "none"])
def test_layer_norm(dtype, shape, normalized, affine):
    x = rand(shape, dtype, 7) * 3 + 1
    norm = shape[len(shape) - normalized:]
    w = rand(norm, dtype, 8) if affine != "none" else None
    b = rand(norm, dtype, 9) if affine == "weight+bias" else None
    dev = lambda t: t.to("spyre") if t is not None else None  # noqa: E731
    torch.spyre.reset_fallback_counts()
    out, mean, rstd = torch.native_layer_norm(dev(x), norm, dev(w), dev(b), 1e-5)
    assert torch.spyre.fallback_counts() == {}
    # The reference in fp32, rounded once (the device's fp32 math); PyTorch's own dtypes
    # and statistics shapes.
    up = lambda t: t.float() if t is not None else None  # noqa: E731
    want = [t.to(dtype) for t in torch.native_layer_norm(up(x), norm, up(w), up(b), 1e-5)]
    shapes = [t.shape for t in torch.native_layer_norm(x, norm, w, b, 1e-5)]
    for got, ref, shape_ in zip((out, mean, rstd), want, shapes):
        assert got.device.type == "spyre" and got.dtype == dtype and got.shape == shape_
        assert_close(got.cpu(), ref, equal_nan=True, **({} if dtype == torch.float32 else dict(atol=2e-3, rtol=8e-3)))


def test_layer_norm_module_views_and_mixed_parameters():
    ln = torch.nn.LayerNorm(50)
    x = rand((64, 50), torch.float32, 10)
    torch.spyre.reset_fallback_counts()
    got = ln.to("spyre")(x.to("spyre").t().contiguous().t())  # a column-major input
    assert torch.spyre.fallback_counts() == {}
    assert_close(got.cpu(), ln.cpu()(x), atol=1e-5, rtol=1e-5)
    # fp16 input with fp32 parameters: fp16 output, fp32 statistics (as on the CPU).
    h = x.half().to("spyre")
    out, mean, rstd = torch.native_layer_norm(h, [50], ln.weight.to("spyre"), ln.bias.to("spyre"), 1e-5)
    assert out.dtype == torch.float16 and mean.dtype == torch.float32 and rstd.dtype == torch.float32
    assert_close(out.cpu(), ln.cpu()(x.half().float()).half(), atol=2e-3, rtol=2e-3)
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 40\]"):
        torch.nn.functional.layer_norm(h, [40])
    with pytest.raises(RuntimeError, match=r"expected weight and bias of the input's dtype \(Float\).*got weight Half"):
        torch.native_layer_norm(x.to("spyre"), [50], ln.weight.half().to("spyre"), None, 1e-5)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("params", ["affine", "weight only", "none", "mixed"])
def test_layer_norm_backward_runs_on_the_device(dtype, params):
    # Gradients of x, weight and bias against the CPU's in fp32 (the device computes in
    # fp32 and rounds once), over 2-D normalised shapes, a strided grad and a 3-D input.
    if params == "mixed" and dtype == torch.float32:
        pytest.skip("mixed parameters are fp32 with an fp16/bf16 input")
    norm = [6, 35]
    x = rand((3, 4, 6, 35), dtype, 21) * 3 + 1
    pdt = torch.float32 if params == "mixed" else dtype
    w = rand(norm, pdt, 22) if params != "none" else None
    b = rand(norm, pdt, 23) if params in ("affine", "mixed") else None
    dy = rand((3, 4, 35, 6), dtype, 24).transpose(-1, -2)  # not contiguous
    grads = []
    for device in ("spyre", "cpu"):
        leaves = [t.to(device).float() if device == "cpu" else t.to(device) for t in (x, w, b) if t is not None]
        for t in leaves:
            t.requires_grad_(True)
        xs, ws, bs = leaves[0], leaves[1] if w is not None else None, leaves[-1] if b is not None else None
        out = torch.nn.functional.layer_norm(xs, norm, ws, bs, 1e-5)
        torch.spyre.reset_fallback_counts()
        out.backward(dy.to(device).to(out.dtype))
        if device == "spyre":
            assert torch.spyre.fallback_counts() == {}
        grads.append([t.grad for t in leaves])
    for got, want, leaf in zip(grads[0], grads[1], [x, w, b]):
        assert got.dtype == leaf.dtype and got.shape == leaf.shape
        tol = dict(atol=2e-5, rtol=2e-5) if got.dtype == torch.float32 else \
            dict(atol=1e-2, rtol=1e-2) if got.dtype == torch.float16 else dict(atol=6e-2, rtol=4e-2)
        assert_close(got.cpu(), want.to(got.dtype), **tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_safe_softmax_gives_zeros_for_fully_masked_rows(dtype):
    x = rand((6, 33), dtype, 11) * 4
    x[1] = float("-inf")            # fully masked row: zeros, not NaN
    x[3, ::2] = float("-inf")       # partly masked: an ordinary softmax of the rest
    for out_dtype in (None, torch.float32):
        torch.spyre.reset_fallback_counts()
        got = torch._safe_softmax(x.to("spyre"), -1, out_dtype)
        assert torch.spyre.fallback_counts() == {}
        want = torch._safe_softmax(x.float(), -1).to(out_dtype or dtype)
        assert got.dtype == want.dtype
        assert_close(got.cpu(), want)
        assert got.cpu()[1].eq(0).all()


def test_attention_runs_on_the_device_with_causal_and_boolean_masks():
    q, k, v = (rand((2, 3, 17, 16), torch.float32, s) for s in (12, 13, 14))
    mask = torch.rand(17, 17, generator=torch.Generator().manual_seed(15)) > 0.3
    mask[4] = False                 # a query that may attend to nothing: zeros
    F = torch.nn.functional
    for kwargs in (dict(attn_mask=mask), dict(is_causal=True), dict()):
        torch.spyre.reset_fallback_counts()
        got = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                             **{n: t.to("spyre") if isinstance(t, torch.Tensor) else t
                                                for n, t in kwargs.items()})
        assert torch.spyre.fallback_counts() == {}
        assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, **kwargs), atol=1e-5, rtol=1e-5)


def test_isneginf_isposinf_and_logical_not():
    x = rand((5, 7), torch.float32, 16)
    x[0, 0], x[1, 1], x[2, 2], x[3, 3] = float("-inf"), float("inf"), float("nan"), 0.0
    for dtype in FLOATS + [torch.int32, torch.bool]:
        t = x.nan_to_num(0.0).to(dtype) if dtype in (torch.int32, torch.bool) else x.to(dtype)
        for fn in (torch.isneginf, torch.isposinf, torch.logical_not, torch.isinf, torch.isnan):
            check(fn, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool], ids=str)
def test_any_and_all_over_dims(dtype):
    x = rand((5, 7, 33), torch.float32, 17)
    x = torch.where(x.abs() < 1.5, torch.zeros_like(x), x).to(dtype)  # many zeros
    x[1] = 1                    # a slab all true
    x[2] = 0                    # a slab all false
    for fn in (torch.any, torch.all):
        check(lambda t: fn(t), x)
        check(lambda t: fn(t, 1), x)
        check(lambda t: fn(t, -1, keepdim=True), x)
        check(lambda t: fn(t, (0, 2)), x)
        check(lambda t: fn(t[:, :0]), x)         # empty: any False, all True
        check(lambda t: fn(t.transpose(0, 2), 0), x)


def test_complex_abs_and_mean_follow_the_cpu():
    # abs of complex gave complex64 (so comparisons of complex spyre tensors failed) and
    # mean of complex raised "could not infer output dtype".
    z = torch.randn(3, 4, dtype=torch.cfloat)
    d = z.to("spyre")
    a = d.abs()
    assert a.dtype == torch.float32 and a.device.type == "spyre"
    torch.testing.assert_close(a.cpu(), z.abs())
    torch.testing.assert_close(d.mean().cpu(), z.mean())
    torch.testing.assert_close(d.mean(1).cpu(), z.mean(1))
    torch.testing.assert_close(d.cpu(), z)  # assert_close itself takes abs of the difference
    out = torch.empty(3, 4, device="spyre")
    torch.abs(d, out=out)
    torch.testing.assert_close(out.cpu(), z.abs())


@pytest.mark.parametrize("fn", [torch.all, torch.any])
def test_all_and_any_over_no_dims_keep_the_shape(fn):
    # dim=[] reduces nothing: each element's truth (it reduced everything before).
    x = torch.tensor([[0.0, 1.0, -2.0], [3.0, 0.0, 0.5]])
    for t in (x, x > 0):
        r = fn(t.to("spyre"), dim=[])
        assert r.shape == t.shape and r.dtype == torch.bool
        assert torch.equal(r.cpu(), fn(t, dim=[]))


def test_a_layer_norm_row_longer_than_the_scratchpad_runs_on_the_cpu():
    # A 9.4M-element row needed 377 MB of scratchpad and raised; it now falls back, counted.
    x = torch.randn(1, 9_400_000)
    torch.spyre.reset_fallback_counts()
    y = torch.nn.functional.layer_norm(x.to("spyre"), (9_400_000,))
    torch.testing.assert_close(y.cpu(), torch.nn.functional.layer_norm(x, (9_400_000,)))
    assert torch.spyre.fallback_counts().get("aten::native_layer_norm") == 1


def test_argmax_and_max_along_a_dim_run_on_the_device():
    # Greedy decoding's argmax over a vocabulary row (longer than one tile), NaN first.
    torch.manual_seed(11)
    logits = torch.randn(3, 50000, dtype=torch.float16)
    logits[1, 123] = float("nan")
    logits[2, 40000] = 100  # in the third tile
    dev = logits.to("spyre")
    torch.spyre.reset_fallback_counts()
    idx = dev.argmax(-1)
    values, where = dev.max(-1, keepdim=True)
    low = dev.argmin(dim=0)
    assert torch.spyre.fallback_counts() == {}
    assert idx.dtype == torch.int64 and torch.equal(idx.cpu(), logits.argmax(-1))
    assert idx.cpu().tolist()[1:] == [123, 40000]
    want_v, want_i = logits.max(-1, keepdim=True)
    assert torch.equal(where.cpu(), want_i)
    torch.testing.assert_close(values.cpu(), want_v, equal_nan=True)
    assert torch.equal(low.cpu(), logits.argmin(dim=0))
