"""mm, bmm, addmm, baddbmm (functional, out=, in-place), matmul and linear on the device:
odd sizes, transposed and broadcast operands, zero-size and 0-d cases, against a float64
reference within fp32-accumulation tolerance and without falling back."""

import pytest
import torch
from torch.testing import assert_close

from test_pointwise import FLOATS, rand


def tol(dtype, k):
    # fp32 accumulation over k products of the dtype's values, then one rounding.
    eps = torch.finfo(dtype).eps
    return dict(atol=(k ** 0.5) * 4e-6 + 4 * eps * (k ** 0.5), rtol=4 * eps)


def run(fn, *args, k=1):
    torch.spyre.reset_fallback_counts()
    got = fn(*[a.to("spyre") if isinstance(a, torch.Tensor) else a for a in args])
    counts = torch.spyre.fallback_counts()
    want = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args]).to(got.dtype)
    assert got.device.type == "spyre" and got.shape == want.shape and got.dtype == want.dtype
    assert_close(got.cpu().double(), want.double(), **tol(got.dtype, k))
    assert counts == {}, counts


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 1, 1000), (1, 4097, 7), (300, 513, 17), (65, 1000, 129)])
def test_mm_bmm_and_transposes(dtype, m, n, k):
    a, b = rand((m, k), dtype, 1), rand((k, n), dtype, 2)
    run(torch.mm, a, b, k=k)
    run(lambda x, y: torch.mm(x.t().contiguous().t(), y), a, b, k=k)      # A column-major
    run(lambda x, y: torch.mm(x, y.t().contiguous().t()), a, b, k=k)      # B column-major
    run(lambda x, y: x @ y[:, ::1], a, b, k=k)
    batched_a, batched_b = rand((3, m, k), dtype, 3), rand((3, k, n), dtype, 4)
    run(torch.bmm, batched_a, batched_b, k=k)
    run(lambda x, y: torch.bmm(x, y.expand(3, k, n)), batched_a, b.unsqueeze(0), k=k)  # batch stride 0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_addmm_baddbmm_linear_matmul(dtype):
    a, b, bias = rand((33, 70), dtype, 1), rand((70, 45), dtype, 2), rand((45,), dtype, 3)
    run(lambda s, x, y: torch.addmm(s, x, y), bias, a, b, k=70)
    run(lambda s, x, y: torch.addmm(s, x, y, beta=0.5, alpha=2), bias, a, b, k=70)
    w = rand((45, 70), dtype, 4)
    run(lambda x, w_, s: torch.nn.functional.linear(x, w_, s), a, w, bias, k=70)
    run(lambda x, w_: torch.nn.functional.linear(x, w_), rand((2, 5, 70), dtype, 5), w, k=70)
    ba, bb, bs = rand((4, 9, 70), dtype, 6), rand((4, 70, 11), dtype, 7), rand((4, 9, 11), dtype, 8)
    run(lambda s, x, y: torch.baddbmm(s, x, y, beta=2, alpha=0.5), bs, ba, bb, k=70)
    run(torch.matmul, rand((2, 3, 9, 70), dtype, 9), rand((70, 11), dtype, 10), k=70)
    run(torch.matmul, rand((70,), dtype, 11), rand((70, 11), dtype, 12), k=70)   # vector @ matrix
    run(torch.matmul, rand((9, 70), dtype, 13), rand((70,), dtype, 14), k=70)    # matrix @ vector


def test_out_and_in_place_variants():
    a, b, c = rand((20, 30), torch.float32, 1), rand((30, 40), torch.float32, 2), rand((20, 40), torch.float32, 3)
    da, db, dc = a.to("spyre"), b.to("spyre"), c.to("spyre")
    torch.spyre.reset_fallback_counts()
    out = torch.empty(0, device="spyre")
    torch.mm(da, db, out=out)
    assert_close(out.cpu(), a @ b, atol=1e-4, rtol=1e-5)
    dc.addmm_(da, db, beta=0.5)
    assert_close(dc.cpu(), 0.5 * c + a @ b, atol=1e-4, rtol=1e-5)
    batched = torch.empty(2, 20, 40, device="spyre")
    torch.bmm(da.expand(2, 20, 30), db.expand(2, 30, 40), out=batched)
    assert_close(batched.cpu(), (a @ b).expand(2, 20, 40), atol=1e-4, rtol=1e-5)
    assert torch.spyre.fallback_counts() == {}


def test_zero_size_products():
    run(torch.mm, torch.randn(0, 5), torch.randn(5, 3))
    run(torch.mm, torch.randn(4, 0), torch.randn(0, 3))   # k = 0: zeros
    run(torch.bmm, torch.randn(0, 2, 3), torch.randn(0, 3, 4))
    run(lambda s, x, y: torch.addmm(s, x, y), torch.randn(3), torch.randn(4, 0), torch.randn(0, 3))


def test_a_large_gemm_matches_with_panels_shared_over_the_ring():
    # Large enough for a multi-core grid with panels forwarded core to core.
    a, b = rand((520, 1030), torch.float16, 1), rand((1030, 770), torch.float16, 2)
    run(torch.mm, a, b, k=1030)


@pytest.mark.parametrize("b_transposed", [False, True], ids=["B", "B^T"])
def test_two_tiles_a_k_step_apart_and_a_pieced_tail(b_transposed):
    # On the CI chip this shape runs two tiles per core, the second a K step behind the
    # first (tests/compiler: "the second tile runs a K step behind"), K in 4 full steps
    # and a ragged one, and the core's last matmul in row pieces stored one by one.
    a, b = rand((1152, 2200), torch.float16, 5), rand((2200, 700), torch.float16, 6)
    if b_transposed:
        run(lambda x, y: torch.nn.functional.linear(x, y), a, b.t().contiguous(), k=2200)
    else:
        run(torch.mm, a, b, k=2200)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_linear_bias_is_added_in_the_matmul_kernel(dtype):
    # nn.Linear's bias goes into the matmul's epilogue (before rounding): one kernel and
    # no extra pass over the output, on shapes with one and with two tiles per core, a
    # K-step offset and a pieced tail (the 1152 x 700 x 2200 case above), and ragged.
    import spyre_sim

    for m, n, k in [(1152, 700, 2200), (33, 45, 70), (1, 4097, 7)]:
        x, w, bias = rand((m, k), dtype, 21), rand((n, k), dtype, 22), rand((n,), dtype, 23)
        run(lambda x_, w_, b_: torch.nn.functional.linear(x_, w_, b_), x, w, bias, k=k)
        run(lambda b_, x_, w_: torch.addmm(b_.unsqueeze(0), x_, w_.t()), bias, x, w, k=k)  # a [1, n] bias
        names = [kk["name"] for kk in spyre_sim.run(lambda x_, w_, b_: torch.nn.functional.linear(x_, w_, b_),
                                                    x.to("spyre"), w.to("spyre"), bias.to("spyre"))["kernels"]]
        assert names == ["aten::addmm"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_biased_linear_of_odd_tiny_shapes_compiles_and_matches(dtype):
    # fp16/bf16 outputs of odd m x n ended at 2 mod 4, where the fp32 bias row was put:
    # "vconvert: destination address 14 is not aligned" (an invalid program) before.
    for m, n, k in [(1, 1, 1), (1, 1, 3), (3, 1, 1), (5, 5, 5), (7, 3, 9), (1, 9, 2)]:
        x, w, bias = rand((m, k), dtype, 31), rand((n, k), dtype, 32), rand((n,), dtype, 33)
        run(lambda x_, w_, b_: torch.nn.functional.linear(x_, w_, b_), x, w, bias, k=k)
        run(lambda b_, x_, w_: torch.addmm(b_, x_, w_.t()), bias, x, w, k=k)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_attention_head_slices_are_read_in_place(dtype):
    # q, k, v as views of [tokens, heads * dim] projections: each head's matrix has a row
    # pitch of heads * dim, k^T is column-major with that pitch. No copies: one kernel
    # per product, reading only the operands' bytes.
    import spyre_sim

    tokens, heads, dim = 33, 4, 16
    q, k = rand((tokens, heads * dim), dtype, 31), rand((tokens, heads * dim), dtype, 32)
    heads_of = lambda t: t.view(tokens, heads, dim).transpose(0, 1)  # noqa: E731  [heads, tokens, dim]
    scores = lambda q_, k_: torch.bmm(heads_of(q_), heads_of(k_).transpose(1, 2))  # noqa: E731
    run(scores, q, k, k=dim)
    run(lambda q_, k_: torch.mm(q_[:, 16:32], k_[:, 16:32].t()), q, k, k=dim)  # one head, 2-D
    names = [kk["name"] for kk in spyre_sim.run(scores, q.to("spyre"), k.to("spyre"))["kernels"]]
    assert names == ["aten::bmm"]


def test_a_batched_gemm_with_single_tile_edge_blocks_matches():
    # On the CI chip: two tiles per core with the K-step offset, an odd number of row
    # tiles (single-tile edge blocks in the same grid columns) and several blocks per
    # core; the ring messages must pair up (tests/compiler: "every ring message sent").
    a, b = rand((3, 768, 2200), torch.float16, 41), rand((3, 2200, 512), torch.float16, 42)
    run(torch.bmm, a, b, k=2200)


def test_integer_products_truncate_float_alpha_and_beta_as_the_cpu():
    # addmm/addmv/baddbmm of integers with alpha 2.5 and beta 1.5 raised before.
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-5, 5, (3, 3), generator=g)
    v = torch.randint(-5, 5, (3,), generator=g)
    for fn, args in [(torch.addmm, (a, a, a)), (torch.addmv, (v, a, v)), (torch.baddbmm, (a[None], a[None], a[None]))]:
        expect = fn(*args, beta=1.5, alpha=2.5)
        got = fn(*(t.to("spyre") for t in args), beta=1.5, alpha=2.5)
        assert got.dtype == expect.dtype
        assert torch.equal(got.cpu(), expect)


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


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (33, 70, 129), (1, 300, 256), (200, 17, 1000)])
def test_int_mm_runs_on_the_arrays_and_matches_the_cpu_exactly(m, n, k):
    g = torch.Generator().manual_seed(m * n + k)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=g, dtype=torch.int8)
    torch.spyre.synchronize()
    torch.spyre.reset_fallback_counts()
    before = torch.spyre.report()["macs"]["int8"]
    got = torch._int_mm(a.to("spyre"), b.to("spyre"))
    assert got.dtype == torch.int32 and got.device.type == "spyre"
    assert torch.equal(got.cpu(), torch._int_mm(a, b))
    assert torch.spyre.fallback_counts() == {}
    torch.spyre.synchronize()
    assert torch.spyre.report()["macs"]["int8"] - before == m * n * k
    # A transposed operand is read in place; out= takes an int32 tensor.
    out = torch.empty(m, n, dtype=torch.int32, device="spyre")
    torch._int_mm(a.to("spyre"), b.t().contiguous().to("spyre").t(), out=out)
    assert torch.equal(out.cpu(), torch._int_mm(a, b))
    with pytest.raises(RuntimeError, match="int8"):
        torch._int_mm(a.to("spyre").float(), b.to("spyre").float())


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_scaled_mm_runs_fp8_on_the_arrays_against_the_dequantised_product(fp8, out_dtype):
    # PyTorch 2.6 has _scaled_mm for CUDA only: the reference is its definition, the
    # fp8 operands dequantised to fp32, multiplied, scaled, biased and rounded once.
    m, n, k = 48, 80, 160
    g = torch.Generator().manual_seed(7)
    a = (torch.randn(m, k, generator=g) * 2).to(fp8)
    b = (torch.randn(n, k, generator=g) * 2).to(fp8).t()  # column-major, as cuBLASLt wants it
    scale_a, scale_b = torch.tensor(0.5), torch.tensor(1.25)
    bias = torch.randn(n, generator=g).to(out_dtype)
    torch.spyre.synchronize()
    torch.spyre.reset_fallback_counts()
    before = torch.spyre.report()["macs"]["fp8"]
    got = torch._scaled_mm(a.to("spyre"), b.to("spyre"), scale_a.to("spyre"), scale_b.to("spyre"),
                           bias=bias.to("spyre"), out_dtype=out_dtype)
    want = (a.float() @ b.float()) * (0.5 * 1.25) + bias.float()
    assert got.dtype == out_dtype and got.device.type == "spyre"
    eps = torch.finfo(out_dtype).eps
    assert_close(got.cpu().float(), want.to(out_dtype).float(), rtol=eps, atol=1e-5)
    assert torch.spyre.fallback_counts() == {}
    torch.spyre.synchronize()
    assert torch.spyre.report()["macs"]["fp8"] - before == m * n * k
    with pytest.raises(RuntimeError, match="per-tensor scales"):
        torch._scaled_mm(a.to("spyre"), b.to("spyre"), torch.ones(m, 1).to("spyre"), scale_b.to("spyre"),
                         out_dtype=out_dtype)
    with pytest.raises(RuntimeError, match="out_dtype"):
        torch._scaled_mm(a.to("spyre"), b.to("spyre"), scale_a.to("spyre"), scale_b.to("spyre"))


def test_operands_on_different_devices_raise_as_on_cuda():
    # A forgotten .to() must not run quietly on the CPU and hand back a spyre tensor.
    cpu, dev = torch.ones(4, 4), torch.ones(4, 4, device="spyre")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(cpu, dev)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(dev, cpu)
    linear = torch.nn.Linear(4, 4).to("spyre")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        linear(torch.ones(2, 4))
    if torch.spyre.device_count() > 1:
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.mm(dev, torch.ones(4, 4, device="spyre:1"))
