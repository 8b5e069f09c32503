"""Property tests of the kernel compiler through PyTorch: every generator (pointwise,
reductions, softmax, layer norm, matmul with and without a bias epilogue, gather,
triangles, cat) over many random small and ragged shapes, dtypes and layouts. Each case
loads the compiled program (the driver validates it: an invalid program is an error) and
compares the result with the CPU. Hypothesis runs derandomized: the same cases every run.
Longer runs: SPYRE_PROPERTY_EXAMPLES=1000 (tests/README.md)."""

import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("SPYRE_PROPERTY_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
FLOATS = [torch.float32, torch.float16, torch.bfloat16]

dtypes = st.sampled_from(FLOATS)
dims = st.integers(1, 19)
shapes = st.lists(dims, min_size=1, max_size=3)
LAYOUTS = ["contiguous", "transposed", "strided", "offset"]


def make(shape, dtype, layout, seed, positive=False):
    """A CPU tensor of `shape` in the given memory layout (same values either way)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g)
    if positive:
        t = t.abs() + 0.5
    t = t.to(dtype)
    if layout == "transposed" and len(shape) >= 2:
        t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "strided":
        wide = torch.zeros(*shape[:-1], 2 * shape[-1], dtype=dtype)
        wide[..., ::2] = t
        t = wide[..., ::2]
    elif layout == "offset":
        flat = torch.zeros(t.numel() + 3, dtype=dtype)
        flat[3:] = t.reshape(-1)
        t = flat[3:].view(shape)
    return t


def to_device(t):
    """The same layout on spyre (strides and storage offset kept)."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.is_contiguous():
        return t.to("spyre")
    storage = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype)
    storage.copy_(torch.as_strided(t, (storage.numel(),), (1,), 0))
    return storage.to("spyre").as_strided(t.shape, t.stride(), t.storage_offset())


def tolerance(dtype, n=1):
    eps = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    return dict(rtol=4 * eps, atol=4 * eps * math.sqrt(max(n, 1)))


def compare(got, want, dtype, n=1):
    assert got.device.type == "spyre"
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.cpu().double(), want.double(), equal_nan=True, **tolerance(dtype, n))


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
          "where": lambda a, b: torch.where(a > 0, a, b), "clamp": lambda a, b: torch.clamp(a, min=b)}
UNARY = {"exp": torch.exp, "neg": torch.neg, "abs": torch.abs, "sqrt": torch.sqrt, "sigmoid": torch.sigmoid,
         "tanh": torch.tanh, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
         "relu": torch.relu, "log": torch.log, "rsqrt": torch.rsqrt}


@SETTINGS
@given(op=st.sampled_from(sorted(BINARY)), shape=shapes, dtype=dtypes, la=st.sampled_from(LAYOUTS),
       lb=st.sampled_from(LAYOUTS), broadcast=st.integers(0, 3), seed=st.integers(0, 1000))
def test_binary_pointwise(op, shape, dtype, la, lb, broadcast, seed):
    b_shape = list(shape)
    if broadcast == 1:
        b_shape = b_shape[1:] or [1]          # fewer dims
    elif broadcast == 2:
        b_shape[-1] = 1                       # a column
    a = make(shape, dtype, la, seed, positive=op == "div")
    b = make(b_shape, dtype, lb, seed + 1, positive=op == "div")
    fn = BINARY[op]
    compare(fn(to_device(a), to_device(b)), fn(a.double(), b.double()).to(dtype).double(), dtype)


@SETTINGS
@given(op=st.sampled_from(sorted(UNARY)), shape=shapes, dtype=dtypes, layout=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 1000))
def test_unary_pointwise(op, shape, dtype, layout, seed):
    a = make(shape, dtype, layout, seed, positive=op in ("sqrt", "log", "rsqrt"))
    fn = UNARY[op]
    want = fn(a.float()).to(dtype)  # the CPU in fp32 (it has no float64 gelu of fp16), rounded once
    compare(fn(to_device(a)), want, dtype, n=4)


@SETTINGS
@given(op=st.sampled_from(["sum", "mean", "amax", "amin"]), shape=shapes, dtype=dtypes,
       layout=st.sampled_from(LAYOUTS), pick=st.integers(0, 7), keepdim=st.booleans(), seed=st.integers(0, 1000))
def test_reductions(op, shape, dtype, layout, pick, keepdim, seed):
    a = make(shape, dtype, layout, seed)
    reduce_dims = [d for d in range(len(shape)) if pick >> d & 1] or [len(shape) - 1]
    fn = getattr(torch, op)
    n = math.prod(shape[d] for d in reduce_dims)
    compare(fn(to_device(a), reduce_dims, keepdim=keepdim), fn(a.double(), reduce_dims, keepdim=keepdim), dtype, n)


@SETTINGS
@given(shape=shapes, dtype=dtypes, layout=st.sampled_from(LAYOUTS), dim=st.integers(-3, 2), log=st.booleans(),
       seed=st.integers(0, 1000))
def test_softmax(shape, dtype, layout, dim, log, seed):
    dim = dim % len(shape)
    a = make(shape, dtype, layout, seed)
    fn = torch.log_softmax if log else torch.softmax
    compare(fn(to_device(a), dim), fn(a.double(), dim), dtype, n=shape[dim])


@SETTINGS
@given(shape=shapes, dtype=dtypes, normalized=st.integers(1, 3), affine=st.booleans(), seed=st.integers(0, 1000))
def test_layer_norm(shape, dtype, normalized, affine, seed):
    normalized = min(normalized, len(shape))
    ns = shape[-normalized:]
    a = make(shape, dtype, "contiguous", seed)
    w = make(ns, dtype, "contiguous", seed + 1) if affine else None
    b = make(ns, dtype, "contiguous", seed + 2) if affine else None
    got = torch.nn.functional.layer_norm(to_device(a), ns, to_device(w), to_device(b))
    want = torch.nn.functional.layer_norm(a.double(), ns, None if w is None else w.double(),
                                          None if b is None else b.double())
    compare(got, want, dtype, n=math.prod(ns) * 16)


@SETTINGS
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40), batch=st.integers(1, 3), dtype=dtypes,
       ta=st.booleans(), tb=st.booleans(), seed=st.integers(0, 1000))
def test_matmul(m, n, k, batch, dtype, ta, tb, seed):
    for lead in ([], [batch]):  # mm and bmm
        a = make(lead + [k, m], dtype, "contiguous", seed).transpose(-1, -2) if ta else \
            make(lead + [m, k], dtype, "contiguous", seed)
        b = make(lead + [n, k], dtype, "contiguous", seed + 1).transpose(-1, -2) if tb else \
            make(lead + [k, n], dtype, "contiguous", seed + 1)
        compare(torch.matmul(to_device(a), to_device(b)), torch.matmul(a.double(), b.double()), dtype, n=k)


@settings(SETTINGS, max_examples=2 * EXAMPLES)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40), dtype=dtypes,
       bias=st.sampled_from(["row", "full", "linear"]), seed=st.integers(0, 1000))
def test_linear_and_addmm(m, n, k, dtype, bias, seed):
    # The bias epilogue (a row of n values added to the fp32 tile before rounding).
    a = make([m, k], dtype, "contiguous", seed)
    if bias == "linear":
        w = make([n, k], dtype, "contiguous", seed + 2)
        c = make([n], dtype, "contiguous", seed + 3)
        got = torch.nn.functional.linear(to_device(a), to_device(w), to_device(c))
        want = torch.nn.functional.linear(a.double(), w.double(), c.double())
    else:
        b = make([k, n], dtype, "contiguous", seed + 1)
        c = make([n] if bias == "row" else [m, n], dtype, "contiguous", seed + 2)
        got = torch.addmm(to_device(c), to_device(a), to_device(b))
        want = torch.addmm(c.double(), a.double(), b.double())
    compare(got, want, dtype, n=k)


@SETTINGS
@given(rows=st.integers(1, 50), cols=st.integers(1, 40), count=st.integers(1, 30), wide=st.booleans(),
       dtype=st.sampled_from(FLOATS + [torch.int32]), seed=st.integers(0, 1000))
def test_gather(rows, cols, count, wide, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(-100, 100, (rows, cols), generator=g).to(dtype)
    index = torch.randint(0, rows, (count,), generator=g).to(torch.int64 if wide else torch.int32)
    assert torch.equal(torch.index_select(table.to("spyre"), 0, index.to("spyre")).cpu(),
                       torch.index_select(table, 0, index))
    if dtype != torch.int32:
        assert torch.equal(torch.nn.functional.embedding(index.to("spyre"), table.to("spyre")).cpu(),
                           torch.nn.functional.embedding(index, table))


@SETTINGS
@given(shape=st.lists(dims, min_size=2, max_size=3), dtype=dtypes, diagonal=st.integers(-6, 6), lower=st.booleans(),
       layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 1000))
def test_triangles(shape, dtype, diagonal, lower, layout, seed):
    a = make(shape, dtype, layout, seed)
    fn = torch.tril if lower else torch.triu
    assert torch.equal(fn(to_device(a), diagonal).cpu(), fn(a, diagonal))


@SETTINGS
@given(shape=shapes, pieces=st.lists(st.integers(1, 9), min_size=1, max_size=4), dim=st.integers(0, 2),
       dtype=dtypes, layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 1000))
def test_cat(shape, pieces, dim, dtype, layout, seed):
    dim = dim % len(shape)
    parts = []
    for i, p in enumerate(pieces):
        s = list(shape)
        s[dim] = p
        parts.append(make(s, dtype, layout, seed + i))
    assert torch.equal(torch.cat([to_device(p) for p in parts], dim).cpu(), torch.cat(parts, dim))
