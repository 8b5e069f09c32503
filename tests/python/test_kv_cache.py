"""KV-cache updates on the device: index_copy_ (and index_copy, index_copy.out) and the
index_put_ pattern caches use (cache[:, :, pos] = kv) scatter only the named rows in
place (compiler/gather.h compile_scatter); other index_put_ patterns run on the CPU,
counted. Against the CPU, with PyTorch's errors."""

import pytest
import torch


def on_both(fn, *args):
    want = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    torch.spyre.reset_fallback_counts()
    got = fn(*[a.to("spyre") if isinstance(a, torch.Tensor) else a for a in args])
    return got.cpu(), want, torch.spyre.fallback_counts()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("shape,dim", [((2, 3, 16, 8), 2), ((10, 4), 0), ((10, 4), 1), ((5, 6, 7), -1), ((3, 300, 64), 1)])
def test_index_copy_writes_the_named_rows_as_the_cpu(dtype, shape, dim):
    torch.manual_seed(0)
    x = (torch.randn(shape) * 10).to(dtype)
    idx = torch.randperm(shape[dim])[:3]
    sshape = list(shape)
    sshape[dim] = 3
    src = (torch.randn(sshape) * 10).to(dtype)
    for fn in (lambda a, i, b: a.index_copy_(dim, i, b), lambda a, i, b: a.index_copy(dim, i, b),
               lambda a, i, b: torch.index_copy(a, dim, i, b, out=torch.empty_like(a))):
        got, want, fallbacks = on_both(fn, x, idx, src)
        assert fallbacks == {}
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_index_copy_reads_source_rows_with_a_pitch_in_place(dtype):
    # New K rows as a column slice of a fused QKV projection: rows of 2 x 8 values, 40
    # apart. Scattered straight from there (no copy first), as the CPU does.
    import spyre_sim

    torch.manual_seed(1)
    cache, qkv = torch.zeros(12, 2, 8).to(dtype), (torch.randn(5, 40) * 10).to(dtype)
    idx = torch.tensor([3, 0, 11, 7, 5])
    want = cache.clone().index_copy_(0, idx, qkv[:, 16:32].view(5, 2, 8))
    dev, src = cache.to("spyre"), qkv.to("spyre")
    r = spyre_sim.run(lambda: dev.index_copy_(0, idx.to("spyre"), src[:, 16:32].view(5, 2, 8)), warmup=0)
    assert torch.equal(dev.cpu(), want)
    assert [k["name"] for k in r["kernels"]] == ["aten::index_copy_"]
    # Rows that are not whole within the source (a pitch inside a row) still get a copy.
    got = cache.to("spyre").index_copy_(0, idx, src[:, :32].view(5, 2, 16)[:, :, 4:12])
    assert torch.equal(got.cpu(), cache.clone().index_copy_(0, idx, qkv[:, :32].view(5, 2, 16)[:, :, 4:12]))


def test_a_decode_step_moves_one_position_per_head_of_a_cache_view():
    cache, k = torch.zeros(2, 4, 32, 16), torch.randn(2, 4, 1, 16)
    dev = cache.to("spyre")
    import spyre_sim

    # A view of the cache (its first 20 positions), the position on the CPU.
    r = spyre_sim.run(lambda: dev.narrow(2, 0, 20).index_copy_(2, torch.tensor([7]), k.to("spyre")), warmup=0)
    cache.narrow(2, 0, 20).index_copy_(2, torch.tensor([7]), k)
    assert torch.equal(dev.cpu(), cache)
    (scatter,) = [x for x in r["kernels"] if x["name"] == "aten::index_copy_"]
    row = 16 * 4  # one position of one head: 64 bytes
    assert scatter["dram_write_bytes"] <= 2 * 4 * 128  # 8 rows, each within one 128-byte stick: not the cache
    assert scatter["min_dram_bytes"] == 8 + 2 * (2 * 4 * row)  # the index, the rows read and written


def test_cache_assignment_by_position_is_a_scatter_and_other_index_puts_run_on_the_cpu():
    def put(a, i, b):
        a[:, :, i] = b
        return a

    def put_broadcast(a, i, b):
        a[:, i] = b
        return a

    for fn, args in ((put, (torch.zeros(1, 2, 8, 4), torch.tensor([3, 5]), torch.randn(1, 2, 2, 4))),
                     (put, (torch.zeros(1, 2, 8, 4), torch.tensor([-1, -8]), torch.randn(1, 2, 2, 4))),  # from the end
                     (put_broadcast, (torch.zeros(3, 5, 2), torch.tensor([0, 4]), torch.randn(2)))):
        got, want, fallbacks = on_both(fn, *args)
        assert fallbacks == {} and torch.equal(got, want)
    for fn, args in ((lambda a, m, b: a.index_put_((m,), b), (torch.zeros(5), torch.tensor([1, 0, 1, 0, 0]).bool(),
                                                              torch.tensor(1.0))),
                     (lambda a, i, b: a.index_put_((i,), b, accumulate=True), (torch.zeros(5), torch.tensor([1, 1]),
                                                                               torch.tensor([1.0, 2.0])))):
        got, want, fallbacks = on_both(fn, *args)
        assert fallbacks == {"aten::_index_put_impl_": 1} and torch.equal(got, want)


def test_bad_index_copies_fail_as_on_the_cpu_and_an_index_out_of_range_faults():
    for bad in (lambda d: torch.zeros(4, 3, device=d).index_copy_(0, torch.tensor([1], device=d), torch.zeros(1, 2, device=d)),
                lambda d: torch.zeros(4, 3, device=d).index_copy_(0, torch.tensor([1.0], device=d), torch.zeros(1, 3, device=d)),
                lambda d: torch.zeros(4, 3, device=d).index_copy_(0, torch.tensor([1], device=d),
                                                                   torch.zeros(1, 3, device=d, dtype=torch.float16))):
        with pytest.raises(RuntimeError) as cpu:
            bad("cpu")
        with pytest.raises(RuntimeError) as spyre:
            bad("spyre")
        assert str(spyre.value).splitlines()[0] == str(cpu.value).splitlines()[0]
    x = torch.zeros(4, 3, device="spyre")
    x.index_copy_(0, torch.tensor([9], device="spyre"), torch.ones(1, 3, device="spyre"))
    with pytest.raises(RuntimeError, match=r"dma_scatter.*DMA scatter index 9 \(entry 0 of 1\) is outside the table's rows \[0, 4\)"):
        torch.spyre.synchronize()
    # The device keeps working.
    assert torch.equal(torch.ones(2, device="spyre").add(1).cpu(), torch.full((2,), 2.0))


def test_a_compiled_cache_update_writes_the_position_not_the_cache():
    # Functionalization writes cache[:, :, pos] = x as slice_scatters that rebuild the
    # whole cache, then a copy back into it; the backend reinplaces them, so a compiled
    # decode step's update costs the same modelled time whatever the cache's length.
    import json

    def update(x, pos, cache):
        cache[:, :, pos:pos + 1] = x
        return x * 2

    def step_us(length):
        torch._dynamo.reset()
        g = torch.compile(update, backend="spyre", dynamic=True)
        cache = torch.zeros(1, 8, length, 128, device="spyre", dtype=torch.float16)
        x = torch.randn(1, 8, 1, 128).half()
        for pos in (3, 4):  # compile (and the second call's dynamic position)
            g(x.to("spyre"), pos, cache)
        torch.spyre.synchronize()
        torch.ops.spyre.reset_device_stats(0)
        g(x.to("spyre"), 5, cache)
        torch.spyre.synchronize()
        us = json.loads(torch.ops.spyre.run_report(0, "update", 0.0))["metrics"]["time_us"]
        assert torch.equal(cache[:, :, 5:6].cpu(), x) and cache[:, :, 6:].abs().sum().item() == 0
        return us

    short, long = step_us(64), step_us(4096)
    assert long == pytest.approx(short, rel=0.1)
