"""What sampling from logits needs, on the device: topk (compiler/argreduce.h's
compile_topk) against the CPU's values and indices (rows longer than one chunk, either
dim, the smallest, NaN and infinities, PyTorch's limits); cumsum (compile_cumsum)
against float64 sums; multinomial (PyTorch's composite on device kernels, and the
with-replacement stub) against the distribution it samples, with its argument checks;
top-k and top-p sampling steps with no CPU fallback."""

import pytest
import torch


@pytest.mark.parametrize("shape,dim,k,largest,dtype", [
    ((5, 7), -1, 3, True, torch.float32),
    ((5, 7), 0, 2, False, torch.float16),
    ((4, 5, 6), 1, 5, True, torch.float32),
    ((3, 40000), -1, 50, True, torch.float32),   # three chunks per row, candidates carried
    ((1, 128256), -1, 40, False, torch.float16),  # a Llama-3 vocabulary row
    ((64, 300), -1, 256, True, torch.bfloat16),  # the device's largest k
])
def test_topk_matches_the_cpu_on_the_device(shape, dim, k, largest, dtype):
    torch.manual_seed(0)
    x = torch.randn(shape).mul(8).to(dtype)  # fp32: distinct values; 16-bit dtypes have ties
    torch.spyre.reset_fallback_counts()
    v, i = torch.topk(x.to("spyre"), k, dim, largest)
    assert torch.spyre.fallback_counts() == {}
    want_v, want_i = torch.topk(x.float(), k, dim, largest)
    assert v.is_contiguous() and v.shape == want_v.shape and v.dtype == dtype and i.dtype == torch.int64
    torch.testing.assert_close(v.cpu().float(), want_v, rtol=0, atol=0)
    # Equal values (possible in 16-bit dtypes) may be picked in another order: the
    # indices must point at the values returned.
    assert torch.equal(x.gather(dim, i.cpu()), v.cpu())
    if dtype == torch.float32:
        assert torch.equal(i.cpu(), want_i)


def test_topk_orders_nan_and_infinities_as_the_cpu_and_equal_values_by_index():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 3.0, inf, 3.0, -inf, nan], [-inf, -inf, -inf, -inf, 0.0, -inf, -inf]])
    v, i = torch.topk(x.to("spyre"), 7)
    torch.testing.assert_close(v.cpu(), torch.topk(x, 7).values, equal_nan=True)
    assert i.cpu().tolist() == [[1, 6, 3, 2, 4, 0, 5], [4, 0, 1, 2, 3, 5, 6]]
    v, i = torch.topk(x.to("spyre"), 7, largest=False)
    torch.testing.assert_close(v.cpu(), torch.topk(x, 7, largest=False).values, equal_nan=True)
    assert i.cpu().tolist() == [[5, 0, 2, 4, 3, 1, 6], [0, 1, 2, 3, 5, 6, 4]]


def test_topk_beyond_the_device_runs_on_the_cpu_counted_and_checks_k():
    x = torch.randn(3, 600)
    torch.spyre.reset_fallback_counts()
    v, i = torch.topk(x.to("spyre"), 300)  # k above the device's 256
    assert torch.spyre.fallback_counts() == {"aten::topk": 1}
    assert torch.equal(v.cpu(), torch.topk(x, 300).values)
    v, i = torch.topk(x.to("spyre"), 0)
    assert v.shape == (3, 0) and i.shape == (3, 0)
    with pytest.raises(RuntimeError, match="k out of range"):
        torch.topk(x.to("spyre"), 601)
    out_v, out_i = torch.empty(0, device="spyre"), torch.empty(0, device="spyre", dtype=torch.long)
    torch.topk(x.to("spyre"), 4, out=(out_v, out_i))
    assert torch.equal(out_v.cpu(), torch.topk(x, 4).values) and torch.equal(out_i.cpu(), torch.topk(x, 4).indices)


def test_topk_sampling_runs_without_fallbacks():
    # Top-k sampling's device part: the k best logits, their softmax, and the chosen ids.
    logits = torch.randn(2, 32000)
    v, i = torch.topk(logits.to("spyre"), 50)
    probs = torch.softmax(v, -1)
    want_v, want_i = torch.topk(logits, 50)
    torch.testing.assert_close(probs.cpu(), torch.softmax(want_v, -1))
    assert torch.equal(i.cpu(), want_i)


@pytest.mark.parametrize("shape,dim,dtype,out_dtype", [
    ((5, 7), -1, torch.float32, None),
    ((5, 7), 0, torch.float16, None),
    ((4, 5, 6), 1, torch.float32, None),
    ((300, 70), 1, torch.float32, None),           # many rows a tile: the row masks
    ((3, 40000), -1, torch.float32, None),         # chunked rows: the running total carried
    ((1, 128256), -1, torch.bfloat16, torch.float32),
    ((), 0, torch.float32, None),
])
def test_cumsum_matches_float64_sums(shape, dim, dtype, out_dtype):
    torch.manual_seed(0)
    x = torch.rand(shape).to(dtype)
    torch.spyre.reset_fallback_counts()
    y = torch.cumsum(x.to("spyre"), dim, dtype=out_dtype)
    assert torch.spyre.fallback_counts() == {}
    want = torch.cumsum(x.double(), dim)
    assert y.dtype == (out_dtype or dtype) and y.shape == want.shape and y.is_contiguous()
    # fp32 sums (pairwise, by doubling steps): within a few units of the last place of
    # the largest sum, in the result's dtype.
    ulp = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[y.dtype]
    bound = 4 * ulp * max(1.0, want.abs().max().item())
    assert (y.cpu().double() - want).abs().max().item() <= bound


def test_cumsum_in_place_out_and_integers():
    x = torch.randn(4, 6)
    y = x.to("spyre")
    y.cumsum_(1)
    torch.testing.assert_close(y.cpu(), x.cumsum(1))
    out = torch.empty(0, device="spyre")
    torch.cumsum(x.to("spyre"), 0, out=out)
    torch.testing.assert_close(out.cpu(), x.cumsum(0))
    torch.spyre.reset_fallback_counts()
    i = torch.cumsum(torch.arange(5, device="spyre", dtype=torch.int32), 0)  # sums as int64: the CPU, counted
    assert i.dtype == torch.int64 and i.cpu().tolist() == [0, 1, 3, 6, 10]
    assert torch.spyre.fallback_counts() == {"aten::cumsum": 1}


def test_multinomial_samples_the_distribution_on_the_device():
    torch.spyre.manual_seed(0)
    p = torch.tensor([0.1, 0.2, 0.7, 0.0])
    torch.spyre.reset_fallback_counts()
    n = 20000
    s = torch.multinomial(p.to("spyre"), n, replacement=True)
    one = torch.multinomial(p.to("spyre").expand(n, 4), 1)
    assert torch.spyre.fallback_counts() == {}
    assert s.dtype == torch.int64 and s.shape == (n,) and one.shape == (n, 1)
    for draws in (s.cpu(), one.cpu().flatten()):
        freq = torch.bincount(draws, minlength=4).double() / n
        assert freq[3] == 0
        assert ((freq - p.double()).abs() <= 5 * (p.double() * (1 - p.double()) / n).sqrt() + 1e-9).all()
    # The same seed, the same samples.
    torch.spyre.manual_seed(0)
    assert torch.equal(torch.multinomial(p.to("spyre"), n, replacement=True).cpu(), s.cpu())


def test_multinomial_checks_its_arguments_as_pytorch():
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        torch.multinomial(torch.zeros(3, device="spyre"), 1)
    with pytest.raises(RuntimeError, match="inf.*nan.*element < 0"):
        torch.multinomial(torch.tensor([0.5, -1.0], device="spyre"), 1)
    with pytest.raises(RuntimeError, match="entry < 0"):
        torch.multinomial(torch.tensor([0.5, -1.0], device="spyre"), 3, replacement=True)
    with pytest.raises(RuntimeError, match="entry < 0"):  # NaN fails the CPU's first check too
        torch.multinomial(torch.tensor([0.5, float("nan")], device="spyre"), 3, replacement=True)
    with pytest.raises(RuntimeError, match="infinity or NaN"):
        torch.multinomial(torch.tensor([0.5, float("inf")], device="spyre"), 3, replacement=True)
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist"):
        torch.multinomial(torch.ones(3, device="spyre"), 4)
    # The device keeps working.
    assert torch.multinomial(torch.tensor([0.0, 1.0], device="spyre"), 1).item() == 1


def test_top_k_and_top_p_sampling_steps_run_on_the_device():
    torch.manual_seed(0)
    torch.spyre.manual_seed(1)
    logits = torch.randn(2, 32000).to("spyre")
    torch.spyre.reset_fallback_counts()
    # top-k: the 50 best, softmax, one draw, back to vocabulary ids.
    v, i = torch.topk(logits, 50)
    pick = torch.multinomial(torch.softmax(v, -1), 1)
    token = i.gather(-1, pick)
    # top-p over those candidates: keep the smallest set whose probability reaches 0.9.
    probs = torch.softmax(v, -1)
    keep = (torch.cumsum(probs, -1) - probs) < 0.9
    nucleus = torch.multinomial(probs * keep, 1)
    assert torch.spyre.fallback_counts() == {}
    want_v, want_i = torch.topk(logits.cpu(), 50)
    assert torch.equal(i.cpu(), want_i)
    assert token.cpu().flatten().tolist() == [want_i[r, pick[r, 0]].item() for r in range(2)]
    assert keep.cpu()[torch.arange(2), nucleus.cpu().flatten()].all()


@pytest.mark.parametrize("shape,dim,index_shape,dtype", [
    ((4, 10), 1, (4, 3), torch.float32),
    ((4, 10), 0, (3, 10), torch.float16),
    ((5, 6, 7), 1, (5, 2, 7), torch.int64),
    ((5, 6, 7), 2, (4, 6, 3), torch.bfloat16),
])
def test_gather_picks_the_cpus_elements_on_the_device(shape, dim, index_shape, dtype):
    torch.manual_seed(0)
    x = (torch.randn(shape) * 100).to(dtype)
    i = torch.randint(0, shape[dim], index_shape)
    torch.spyre.reset_fallback_counts()
    y = torch.gather(x.to("spyre"), dim, i.to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    assert y.is_contiguous() and torch.equal(y.cpu(), torch.gather(x, dim, i))


def test_gather_out_of_range_is_a_device_fault_and_the_device_keeps_working():
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="gather index 5"):
        torch.gather(x.to("spyre"), 1, torch.tensor([[5]], device="spyre"))
        torch.spyre.synchronize()
    assert torch.gather(x.to("spyre"), 1, torch.tensor([[1]], device="spyre")).item() == x[0, 1].item()


@pytest.mark.parametrize("descending", [False, True])
def test_sort_of_short_rows_runs_on_the_device_stable_with_nan_as_the_cpu(descending):
    nan = float("nan")
    x = torch.tensor([[3.0, nan, -1.0, 3.0, float("-inf"), 0.5, nan, 2.0]]).repeat(3, 1)
    x[1] = torch.arange(8.0).flip(0)
    torch.spyre.reset_fallback_counts()
    v, i = torch.sort(x.to("spyre"), descending=descending, stable=True)
    assert torch.spyre.fallback_counts() == {}
    want_v, want_i = torch.sort(x, descending=descending, stable=True)
    torch.testing.assert_close(v.cpu(), want_v, equal_nan=True)
    assert torch.equal(i.cpu(), want_i)
    assert torch.equal(torch.argsort(x.to("spyre"), dim=0, descending=descending, stable=True).cpu(),
                       torch.argsort(x, dim=0, descending=descending, stable=True))
    long = torch.randn(2, 1000)  # rows beyond the device's 256: the CPU, counted
    assert torch.equal(torch.sort(long.to("spyre")).values.cpu(), torch.sort(long).values)
    assert torch.spyre.fallback_counts() == {"aten::sort": 1}
