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
