"""Pointwise device kernels over every operand layout PyTorch produces: odd sizes,
non-contiguous views, broadcasting, scalars, 0-d and zero-size tensors, mixed dtypes,
in-place and out=. Every case compares with the CPU and checks that nothing fell back."""

import pytest
import torch
from torch.testing import assert_close

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def rand(shape, dtype, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype == torch.int32:
        return torch.randint(-50, 50, shape, generator=g, dtype=torch.int32)
    t = torch.randn(shape, generator=g)
    return (t.abs() + 0.5 if positive else t).to(dtype)


def layouts(n, dtype, seed, positive=False):
    """(name, cpu a, cpu b) pairs: the same math over different memory layouts."""
    base = rand((3, n), dtype, seed, positive)
    other = rand((3, n), dtype, seed + 1, positive)
    wide = rand((n, 6), dtype, seed + 2, positive)
    yield "contiguous", base, other
    yield "transposed", wide.t(), rand((6, n), dtype, seed + 3, positive)
    yield "strided slice", rand((3, 2 * n), dtype, seed + 4, positive)[:, ::2], other
    yield "row broadcast", base, rand((n,), dtype, seed + 5, positive)
    yield "column broadcast", base, rand((3, 1), dtype, seed + 6, positive)
    yield "lhs broadcast", rand((1, n), dtype, seed + 7, positive), base
    yield "0-d operand", base, rand((), dtype, seed + 8, positive)
    yield "expanded", rand((3, 1), dtype, seed + 9, positive).expand(3, n), rand((1, n), dtype, seed + 10, positive)


def on_device(t):
    return t.to("spyre") if isinstance(t, torch.Tensor) else t


def check(fn, *args, atol=None, **kwargs):
    """fn on the device equals fn on the CPU (dtype tolerance), without falling back."""
    torch.spyre.reset_fallback_counts()
    got = fn(*[on_device(a) for a in args], **kwargs)
    counts = torch.spyre.fallback_counts()
    want = fn(*args, **kwargs)
    assert got.device.type == "spyre"
    assert got.dtype == want.dtype and got.shape == want.shape
    if atol is None:
        assert_close(got.cpu(), want, equal_nan=True)
    else:
        rtol = {torch.float32: 1.3e-6, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}[want.dtype]
        assert_close(got.cpu(), want, equal_nan=True, atol=atol, rtol=rtol)
    assert counts == {}, counts


def _table(*families):
    """The backend's op table's ops of these families (backend/aten/op_table.h through
    torch.ops.spyre.fusible_ops), by aten name: a row added there is tested here."""
    rows = (r.split(" ") for r in torch.ops.spyre.fusible_ops())
    return {overload.split(".")[0]: getattr(torch.ops.aten, overload.split(".")[0])
            for family, overload, *_ in rows if family in families}


# The table's binary ops and comparisons, and the alpha forms of add and sub.
BINARY = _table("binary", "compare") | {
    "add alpha": lambda a, b: torch.add(a, b, alpha=3), "sub alpha": lambda a, b: torch.sub(a, b, alpha=0.5),
}


@pytest.mark.parametrize("n", [1, 7, 1000, 4097])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_over_every_layout(name, dtype, n):
    for layout, a, b in layouts(n, dtype, seed=n, positive=name == "div"):
        atol = None
        if "alpha" in name:
            # The CPU's scalar tail rounds alpha * b to the dtype before adding, its
            # vector body does not (we never do): half an ulp of |alpha * b| apart.
            atol = torch.finfo(dtype).eps * 3 * b.abs().max().item() * 1.01
        try:
            check(BINARY[name], a, b, atol=atol)
        except AssertionError as e:
            raise AssertionError(f"{name} {layout}: {e}") from e


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "minimum", "eq", "lt", "ge", "div"])
def test_int32_operands(name):
    for layout, a, b in layouts(1000, torch.int32, seed=5):
        if name == "div":
            b = b.abs() + 1  # true division: the result is float
        check(BINARY[name], a, b)


@pytest.mark.parametrize("name", ["add", "mul", "maximum", "minimum", "eq", "ne", "lt"])
def test_bool_operands(name):
    for layout, a, b in layouts(77, torch.bool, seed=6):
        check(BINARY[name], a, b)


def test_python_scalars_and_promotion():
    x = rand((5, 33), torch.float16, 1)
    i = rand((5, 33), torch.int32, 2)
    f = rand((5, 33), torch.float32, 3)
    check(lambda t: t + 2.5, x)
    check(lambda t: t * -3, x)
    check(lambda t: 1 - t, x)
    check(lambda t: t / 7, i)           # int32 / int -> float32
    check(lambda t: t + 0.5, i)         # int32 + float -> float32
    check(lambda t: t * 3, i)           # stays int32
    check(lambda t, u: t + u, x, f)     # fp16 + fp32 -> fp32
    check(lambda t, u: t * u, i, x)     # int32 * fp16 -> fp16
    check(lambda t: t == 0.1, x)        # the scalar compares rounded to fp16, as on the CPU
    check(lambda t: t > 1, i)
    check(lambda t, u: t + u, x, torch.tensor(2.0))  # a 0-d CPU tensor operand
    check(lambda t, s: s + t, x, torch.tensor(1.5, dtype=torch.float16))  # 0-d CPU tensor, not a wrapped number


def test_zero_size_and_0d_tensors():
    for shape in [(0,), (3, 0), ()]:
        a, b = rand(shape, torch.float32, 1), rand(shape, torch.float32, 2)
        check(torch.add, a, b)
        check(torch.exp, a)
        check(torch.lt, a, b)
        check(lambda t: torch.where(t > 0, t, 0.0), a)


def test_in_place_and_out_variants_write_through_views():
    a = rand((6, 40), torch.float32, 1)
    b = rand((40,), torch.float32, 2)
    d = a.to("spyre")
    torch.spyre.reset_fallback_counts()
    dt = d.t()                      # a non-contiguous view of the device tensor
    dt.mul_(2)
    d[:, ::3].add_(b.to("spyre")[::3], alpha=2)
    d.exp_()
    want = a.clone()
    want.t().mul_(2)
    want[:, ::3].add_(b[::3], alpha=2)
    want.exp_()
    assert_close(d.cpu(), want)
    out = torch.empty(40, 6, device="spyre").t()  # out= into a transposed view
    torch.mul(d, 3, out=out)
    assert_close(out.cpu(), want * 3)
    resized = torch.empty(0, device="spyre")       # out= resized by the op
    torch.sigmoid(d, out=resized)
    assert_close(resized.cpu(), torch.sigmoid(want))
    mask = torch.empty(6, 40, dtype=torch.bool, device="spyre")
    torch.gt(d, 1.0, out=mask)
    assert torch.equal(mask.cpu(), want > 1.0)
    f = a.to("spyre")
    f.lt_(0)                        # in-place comparison: bool converted to float
    assert torch.equal(f.cpu(), (a < 0).float())
    assert torch.spyre.fallback_counts() == {}


@pytest.mark.parametrize("n", [1, 7, 1000, 4097])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=str)
def test_where_and_clamp(dtype, n):
    x = rand((7, n), dtype, 1)
    y = rand((n,), dtype, 2)
    cond = rand((7, 1), torch.bool, 3)
    check(torch.where, cond, x, y)
    check(lambda c, t: torch.where(c, t, 0), cond, x)
    check(lambda t: torch.where(t > 0, t, -t), x)
    check(lambda t: torch.clamp(t, -0.5, 0.5) if dtype != torch.int32 else torch.clamp(t, -5, 5), x)
    check(lambda t: torch.clamp(t, min=0), x)
    check(lambda t: torch.clamp(t, max=1), x)
    lo, hi = rand((n,), dtype, 4) - 1, rand((7, 1), dtype, 5) + 1
    check(lambda t, a, b: torch.clamp(t, a, b), x, lo, hi)
    check(lambda t, a: torch.clamp(t, min=a), x, lo)
    check(lambda t: torch.where(t > 0, t, 1), x.t())        # a non-contiguous view
    check(lambda t: torch.clamp(t, 0, 1), x[0, 0])           # 0-d
    check(lambda t: torch.where(t > 0, t, 0), x[:, :0])      # zero-size


# The table's unary ops, and gelu's two forms (a kernel of its own).
UNARY = _table("unary") | {
    "gelu": torch.nn.functional.gelu, "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
}
# The one per-op test table: ops defined only for positive inputs get positive samples.
POSITIVE = {"log", "sqrt", "rsqrt"}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_over_views_and_variants(name, dtype):
    positive = name in POSITIVE
    x = rand((9, 4097), dtype, 11, positive)
    op = UNARY[name]
    check(op, x)
    check(op, x.t())
    check(op, x[:, 1::5])
    check(op, x[0, 0])  # 0-d
    if hasattr(torch.Tensor, name + "_"):
        inplace = getattr(torch.Tensor, name + "_")
        d = x.to("spyre")
        inplace(d.t())
        want = x.clone()
        inplace(want.t())
        assert_close(d.cpu(), want, equal_nan=True)


def test_int_unary_ops_and_float_promotion():
    i = rand((4, 100), torch.int32, 3)
    check(torch.neg, i)
    check(torch.abs, i)
    check(torch.relu, i)
    check(torch.exp, i.float().clamp(-5, 5).int())  # int -> float result


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=str)
@pytest.mark.parametrize("e", [1, 2, 3, 0.5, -0.5, -1.0, -2.0])
def test_pow_with_the_exponents_models_use(dtype, e):
    # Squares (RMSNorm), cubes (tanh-GELU), square roots and reciprocals; an integer
    # base with a float exponent promotes to float, as on the CPU.
    x = rand((3, 1000), dtype, 21, positive=True)
    tol = None if dtype == torch.int32 or e in (1, 2, 0.5, -0.5, -1.0) else 1e-6
    check(lambda t: torch.pow(t, e), x, atol=tol)
    check(lambda t: t.t() ** e, x, atol=tol)  # a transposed view
    if dtype != torch.int32 or isinstance(e, int):
        y = x.to("spyre")
        y.pow_(e)
        assert_close(y.cpu(), x ** e, rtol=1e-3 if dtype == torch.float16 else 1.6e-2 if dtype == torch.bfloat16 else 1.3e-6,
                     atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=str)
def test_pow_with_any_other_exponent_is_the_vector_units_pow(dtype):
    x = rand((5, 70), dtype, 22, positive=True)
    exponents = [0, 4, 7, 1.5, -1.25, 0.1] if dtype != torch.int32 else [0, 4, 5, 1.5, -0.5]
    for e in exponents:
        check(lambda t: torch.pow(t, e), x, atol=1e-5 if dtype == torch.float32 else None)
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.pow(rand((3,), torch.int32, 23).to("spyre"), -1)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_with_a_tensor_exponent_follows_c_pow_on_every_special_case(dtype):
    # Every pairing of C's pow special cases: zeros of both signs, +-1, +-inf, NaN,
    # negative bases with odd, even and non-integer exponents, exponents beyond 2^24.
    special = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, -2.5, 7.0,
               float("inf"), float("-inf"), float("nan"), 1e-3, 33.0, -33.0, 2.0 ** 25, -(2.0 ** 25) - 2]
    values = torch.tensor(special, dtype=dtype)
    base, exponent = values[:, None].expand(-1, len(special)), values[None, :].expand(len(special), -1)
    torch.spyre.reset_fallback_counts()
    got = torch.pow(base.to("spyre"), exponent.to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    want = torch.pow(base.float(), exponent.float()).to(dtype)
    assert_close(got.cpu(), want, equal_nan=True)
    # Signed zeros and infinities keep their sign.
    assert torch.equal(got.cpu().float().isfinite(), want.float().isfinite())
    assert torch.equal(torch.signbit(got.cpu()[~want.isnan()]), torch.signbit(want[~want.isnan()]))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_with_a_tensor_exponent_over_layouts_in_place_and_out(dtype):
    tol = {}
    for name, a, b in layouts(300, dtype, 61):
        for fn in (torch.pow, lambda t, u: t.pow(u)):
            torch.spyre.reset_fallback_counts()
            base, exponent = a * 3, b * 4
            got = fn(on_device(base), on_device(exponent))
            assert torch.spyre.fallback_counts() == {}, name
            assert_close(got.cpu(), fn(base.float(), exponent.float()).to(dtype), equal_nan=True, **tol)
    x, e = rand((4, 50), dtype, 62, positive=True), rand((4, 50), dtype, 63)
    check(lambda t: torch.pow(t, torch.tensor(1.7)), x)  # a 0-d CPU exponent: a constant
    check(lambda t: torch.pow(-2.0, t), (e * 4).round())  # a negative scalar base
    check(lambda t: torch.pow(torch.tensor(-3.0), t), e * 4)
    ib = rand((4, 50), torch.int32, 64)  # an int base promotes to e's dtype
    assert_close(torch.pow(ib.to("spyre"), e.to("spyre")).cpu(), torch.pow(ib, e.float()).to(dtype), equal_nan=True, **tol)
    y = x.to("spyre")
    y.pow_(e.to("spyre"))
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.pow(x.to("spyre"), e.to("spyre"), out=out)
    want = torch.pow(x.float(), e.float()).to(dtype)
    assert_close(y.cpu(), want, **tol)
    assert_close(out.cpu(), want, **tol)

    # Integer powers: exact, wrapping as the CPU's; negative exponents give 1, +-1 or 0.
    i = rand((3, 50), torch.int32, 65)
    e = torch.arange(-3, 47, dtype=torch.int32).expand(3, -1)
    for b in (i, i.to(torch.int8), torch.tensor([[1], [-1], [0]], dtype=torch.int32).expand(3, 50)):
        check(torch.pow, b, e.to(b.dtype) if b.dtype == torch.int8 else e)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_and_stack_copy_each_input_into_its_slice(dim):
    a, b = rand((3, 7), torch.float32, 31), rand((3, 7), torch.float16, 32)
    c = rand((7, 3), torch.float32, 33).t()  # non-contiguous
    empty = torch.empty(0)                   # 1-D empty inputs are skipped (legacy rule)
    check(lambda x, y, z, e: torch.cat([x, y, z, e], dim), a, b, c, empty)  # promotes to fp32
    check(lambda x, y: torch.stack([x, y], dim), a, b)
    check(lambda x: torch.cat([x.narrow(dim, 0, 0), x], dim), a)  # a zero-size slice along dim
    out = torch.empty(0, device="spyre", dtype=torch.float32)
    torch.cat([a.to("spyre"), c.to("spyre")], dim, out=out)
    assert_close(out.cpu(), torch.cat([a, c], dim))


def test_cat_reports_mismatched_inputs_like_pytorch():
    a, b = torch.zeros(2, 3, device="spyre"), torch.zeros(2, 4, device="spyre")
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        torch.cat([a, b], 0)
    with pytest.raises(RuntimeError, match="Tensors must have same number of dimensions"):
        torch.cat([a, torch.zeros(3, device="spyre")], 0)
    assert torch.cat([a, b], 1).shape == (2, 7)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        torch.cat([a, b], 1, out=a)  # out= aliasing an input


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool, torch.int64], ids=str)
@pytest.mark.parametrize("diagonal", [0, 1, -2, 40, -40])
def test_tril_and_triu(dtype, diagonal):
    x = rand((2, 3, 33, 17), torch.float32, 41).mul(10).to(dtype)
    check(lambda t: torch.tril(t, diagonal), x)
    check(lambda t: torch.triu(t, diagonal), x)
    check(lambda t: torch.tril(t.transpose(-1, -2), diagonal), x)  # a non-contiguous input
    y = x.to("spyre")
    y.triu_(diagonal)
    assert torch.equal(y.cpu(), torch.triu(x, diagonal))


def test_a_second_call_with_the_same_shapes_reuses_the_cached_kernel():
    a = torch.randn(777).to("spyre")
    torch.ops.spyre.reset_kernel_cache_stats()
    torch.mul(a, a)
    first = dict(torch.ops.spyre.kernel_cache_stats())
    torch.mul(a, a)
    second = dict(torch.ops.spyre.kernel_cache_stats())
    assert second["hits"] == first["hits"] + 1
    assert second["misses"] == first["misses"]


def test_generation_mask_ops_and_scalar_base_pow_run_on_the_device():
    # Masks combine, invert and fill on the device; rotary frequencies' base ** x too.
    torch.manual_seed(7)
    x = torch.randn(5, 33)
    m, n = x > 0, x < 0.5
    dev = x.to("spyre")
    dm, dn = m.to("spyre"), n.to("spyre")
    torch.spyre.reset_fallback_counts()
    got = {
        "and": dm & dn, "or": dm | dn, "xor": dm ^ dn, "not": ~dm,
        "logical_and": torch.logical_and(dev, dev - 0.5), "logical_xor": torch.logical_xor(dm, dev),
        "masked_fill": dev.masked_fill(dm, float("-inf")), "masked_fill_t": dev.masked_fill(dn, torch.tensor(2.0)),
        "rpow": torch.pow(10000.0, dev / 64), "rpow_half": torch.pow(2.0, dev.half()),
    }
    assert torch.spyre.fallback_counts() == {}
    want = {
        "and": m & n, "or": m | n, "xor": m ^ n, "not": ~m,
        "logical_and": torch.logical_and(x, x - 0.5), "logical_xor": torch.logical_xor(m, x),
        "masked_fill": x.masked_fill(m, float("-inf")), "masked_fill_t": x.masked_fill(n, torch.tensor(2.0)),
        "rpow": torch.pow(10000.0, x / 64), "rpow_half": torch.pow(2.0, x.half()),
    }
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        tol = dict(atol=2e-3, rtol=2e-3) if want[k].dtype == torch.float16 else dict(atol=1e-6, rtol=2e-6)
        torch.testing.assert_close(got[k].cpu(), want[k], **tol, msg=lambda msg: f"{k}: {msg}")


@pytest.mark.parametrize("args,dtype", [((10,), None), ((3, -7, -2), None), ((0, 40000), None), ((0, 64, 2), torch.float32),
                                        ((5, 100, 3), torch.int32), ((0, 10), torch.bfloat16), ((-4.0, 4.0), None)])
def test_arange_makes_integer_sequences_on_the_device(args, dtype):
    torch.spyre.reset_fallback_counts()
    got = torch.arange(*args, dtype=dtype, device="spyre")
    assert torch.spyre.fallback_counts() == {}
    want = torch.arange(*args, dtype=dtype)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


def test_arange_beyond_fp32_exact_integers_is_made_on_the_cpu():
    torch.spyre.reset_fallback_counts()
    for args in [(0, 1, 0.1), (0, 2 ** 25, 2 ** 20)]:
        assert torch.equal(torch.arange(*args, device="spyre").cpu(), torch.arange(*args))
    assert torch.spyre.fallback_counts() == {"aten::arange.start_out": 2}


@pytest.mark.parametrize("start,end,steps,dtype", [
    (0, 1, 5, torch.float32), (-3.5, 7.25, 1001, torch.float32), (0, 10000, 40000, torch.float32),
    (1, -1, 7, torch.float16), (0, 1, 100, torch.bfloat16), (2, 2, 3, torch.float32),
])
def test_linspace_on_the_device_is_within_an_ulp_of_the_cpus_with_exact_ends(start, end, steps, dtype):
    torch.spyre.reset_fallback_counts()
    got = torch.linspace(start, end, steps, device="spyre", dtype=dtype).cpu()
    assert torch.spyre.fallback_counts() == {}
    want = torch.linspace(start, end, steps, dtype=dtype)
    assert got.dtype == dtype and got.shape == want.shape
    assert got[0] == want[0] and got[-1] == want[-1]
    # The CPU rounds step * i per vector of lanes, the device per element: one unit in
    # the last place of the largest value at most.
    ulp = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[dtype]
    assert (got.double() - want.double()).abs().max() <= ulp * want.double().abs().max()


def test_linspace_of_one_none_and_integers():
    assert torch.linspace(3, 9, 1, device="spyre").cpu().tolist() == [3.0]
    assert torch.linspace(3, 9, 0, device="spyre").numel() == 0
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.linspace(0, 1, -1, device="spyre")
    torch.spyre.reset_fallback_counts()
    assert torch.equal(torch.linspace(0, 10, 5, device="spyre", dtype=torch.int32).cpu(),
                       torch.linspace(0, 10, 5, dtype=torch.int32))
    assert torch.spyre.fallback_counts() == {"aten::linspace.out": 1}


_ACTIVATIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu,
                "relu": torch.relu, "gelu": torch.nn.functional.gelu,
                "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(_ACTIVATIONS))
def test_activation_gradients_run_on_the_device_as_the_cpu(dtype, name):
    # autograd's tanh_backward, sigmoid_backward, silu_backward, threshold_backward and
    # gelu_backward (both forms) as device kernels: fp32 as the CPU's fp32, half types
    # within one rounding of the CPU's fp32 gradient. Zeros and a strided grad included.
    fn = _ACTIVATIONS[name]
    x = rand((37, 65), torch.float32, 50) * 3
    x[0, :5] = 0.0
    g = rand((65, 37), torch.float32, 51).t()  # not contiguous
    ref = x.clone().requires_grad_()
    fn(ref).backward(g)
    xs = x.to(dtype).to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    fn(xs).backward(g.to(dtype).to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    want = ref.grad if dtype == torch.float32 else fn_grad_in(fn, x.to(dtype).float(), g.to(dtype).float()).to(dtype)
    assert_close(xs.grad.cpu(), want, **{torch.float32: dict(atol=1e-5, rtol=1e-5),
                                          torch.float16: dict(atol=2e-3, rtol=1e-3),
                                          torch.bfloat16: dict(atol=1.6e-2, rtol=8e-3)}[dtype])


def fn_grad_in(fn, x, g):
    """fn's gradient at x (fp32 on the CPU) for the output gradient g. The backward of
    tanh and sigmoid reads the forward's result, which a half-precision run has rounded:
    so the reference rounds it the same way."""
    x = x.clone().requires_grad_()
    y = fn(x)
    if fn in (torch.tanh, torch.sigmoid):
        y_half = y.detach().to(g.dtype)
        return (torch.ops.aten.tanh_backward if fn is torch.tanh else torch.ops.aten.sigmoid_backward)(g, y_half)
    y.backward(g)
    return x.grad


def test_activation_gradient_out_forms_and_a_nan_input():
    grad, x = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([-1.0, 0.0, float("nan"), 2.0])
    out = torch.empty(4, device="spyre")
    torch.ops.aten.threshold_backward.grad_input(grad.to("spyre"), x.to("spyre"), 0.0, grad_input=out)
    # x <= 0 gives 0; a NaN x passes its gradient, as the CPU's kernel does.
    assert torch.equal(out.cpu(), torch.ops.aten.threshold_backward(grad, x, 0.0))
    assert torch.equal(out.cpu(), torch.tensor([0.0, 0.0, 3.0, 4.0]))
    got = torch.empty(4, device="spyre")
    torch.ops.aten.gelu_backward.grad_input(grad.to("spyre"), x.to("spyre"), approximate="tanh", grad_input=got)
    assert_close(got.cpu(), torch.ops.aten.gelu_backward(grad, x, approximate="tanh"), equal_nan=True)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        torch.ops.aten.gelu_backward(grad.to("spyre"), x.to("spyre"), approximate="erf")
