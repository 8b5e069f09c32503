"""Device kernels from the kernel compiler: elementwise binary ops (the first family).
Results equal the CPU's bit for bit and the ops no longer fall back to the CPU."""

import pytest
import torch

OPS = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [1, 7, 1000, 4097, 100000])
def test_binary_ops_match_cpu_without_falling_back(dtype, n):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, generator=g).to(dtype)
    b = (torch.randn(n, generator=g) + 3).to(dtype)
    da, db = a.to("spyre"), b.to("spyre")
    torch.spyre.reset_fallback_counts()
    for op in OPS:
        got = op(da, db)
        assert got.device.type == "spyre"
        assert torch.equal(got.cpu(), op(a, b)), op.__name__
    assert torch.spyre.fallback_counts() == {}


def test_operators_and_shapes_use_the_device_kernels():
    a = torch.randn(3, 4, 5)
    b = torch.randn(3, 4, 5)
    torch.spyre.reset_fallback_counts()
    got = (a.to("spyre") + b.to("spyre")) * b.to("spyre")
    assert torch.equal(got.cpu(), (a + b) * b)
    assert torch.spyre.fallback_counts() == {}


def test_a_second_call_with_the_same_shapes_reuses_the_cached_kernel():
    a = torch.randn(777).to("spyre")
    torch.ops.spyre.reset_kernel_cache_stats()
    torch.mul(a, a)
    first = dict(torch.ops.spyre.kernel_cache_stats())
    torch.mul(a, a)
    second = dict(torch.ops.spyre.kernel_cache_stats())
    assert second["hits"] == first["hits"] + 1
    assert second["misses"] == first["misses"]


def test_int64_operands_run_on_the_cpu_and_are_counted():
    a = torch.randn(4, 5)
    b = torch.randn(5)
    torch.spyre.reset_fallback_counts()
    assert torch.equal((a.to("spyre") + b.to("spyre")).cpu(), a + b)  # broadcasting: on the device
    assert torch.equal(torch.add(a.to("spyre"), a.to("spyre"), alpha=2).cpu(), torch.add(a, a, alpha=2))
    assert torch.spyre.fallback_counts() == {}
    ints = torch.arange(6)
    assert torch.equal((ints.to("spyre") * ints.to("spyre")).cpu(), ints * ints)  # int64
    assert torch.spyre.fallback_counts() == {"aten::mul": 1}


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "relu": torch.relu,  # exact
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": torch.nn.functional.silu, "erf": torch.erf,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
}
EXACT = {"neg", "abs", "relu"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_cpu_without_falling_back(dtype, name):
    op = UNARY[name]
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(4097, generator=g) * 4 + 0.1).to(dtype)  # positive: log, sqrt, rsqrt are defined
    if name in EXACT or name in ("tanh", "erf", "sigmoid", "silu", "gelu", "gelu_tanh"):
        x = (x - 2).to(dtype)
    torch.spyre.reset_fallback_counts()
    got = op(x.to("spyre")).cpu()
    assert torch.spyre.fallback_counts() == {}
    if name in EXACT:
        assert torch.equal(got, op(x))
    else:
        # The device computes in fp32 and rounds once; PyTorch's CPU kernels may differ
        # by an ulp of the dtype (fp32: a few ulp).
        tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        torch.testing.assert_close(got, op(x), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 5, 3), (64, 64, 64), (100, 300, 70), (1, 4097, 33), (300, 17, 513)])
def test_mm_matches_a_float64_reference_within_fp32_accumulation(dtype, mkn):
    m, k, n = mkn
    g = torch.Generator().manual_seed(m * 7 + n)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    bt = torch.randn(n, k, generator=g).to(dtype)  # linear-style weights: used as bt.t()
    torch.spyre.reset_fallback_counts()
    got = torch.mm(a.to("spyre"), b.to("spyre")).cpu()
    got_t = torch.mm(a.to("spyre"), bt.to("spyre").t()).cpu()
    assert torch.spyre.fallback_counts() == {}
    # fp32 accumulation, then one rounding to the dtype.
    tol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(got.double(), a.double() @ b.double(), rtol=tol, atol=tol * k**0.5)
    torch.testing.assert_close(got_t.double(), a.double() @ bt.double().t(), rtol=tol, atol=tol * k**0.5)
