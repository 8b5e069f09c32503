"""spyre::paged_attention: attention over a paged KV cache (pools of token rows, each
sequence's rows named by an int32 slot table), one device kernel that gathers each key
block by its slots. Against the same attention on the CPU over the gathered rows, and
against scaled_dot_product_attention on a contiguous cache holding the same keys."""

import pytest
import torch
import torch.nn.functional as F


def paged_cache(k, v, page, pages, seed=0):
    """Puts contiguous k, v [B, Hkv, T, E] into pools [pages, page, Hkv, E], each
    sequence's pages scattered over the pool in a shuffled order. Returns the pools and
    the slots [B, T] (int32)."""
    b, h, t, e = k.shape
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(pages, generator=g)
    per_seq = (t + page - 1) // page
    assert b * per_seq <= pages
    kp = torch.randn(pages, page, h, e, generator=g).to(k.dtype)  # (rows no sequence owns hold noise)
    vp = torch.randn(pages, page, h, v.shape[-1], generator=g).to(v.dtype)
    slots = torch.empty(b, t, dtype=torch.int32)
    for i in range(b):
        table = order[i * per_seq:(i + 1) * per_seq]
        for pos in range(t):
            slots[i, pos] = int(table[pos // page]) * page + pos % page
    flat_k, flat_v = kp.view(-1, h, e), vp.view(-1, h, v.shape[-1])
    flat_k[slots.flatten().long()] = k.transpose(1, 2).reshape(-1, h, e)
    flat_v[slots.flatten().long()] = v.transpose(1, 2).reshape(-1, h, v.shape[-1])
    return kp, vp, slots


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)], ids=str)
@pytest.mark.parametrize("heads,kv_heads,q_len,kv_len,dim,page", [
    (8, 2, 1, 50, 64, 16),      # a GQA decode step, pages of 16
    (4, 4, 1, 600, 32, 32),     # more keys than one key block (512)
    (4, 1, 3, 77, 128, 8),      # a few queries, one key/value head
])
def test_paged_decode_matches_attention_over_the_same_keys(dtype, tol, heads, kv_heads, q_len, kv_len, dim, page):
    torch.manual_seed(0)
    b = 2
    q = torch.randn(b, heads, q_len, dim).to(dtype)
    k, v = torch.randn(b, kv_heads, kv_len, dim).to(dtype), torch.randn(b, kv_heads, kv_len, dim).to(dtype)
    kp, vp, slots = paged_cache(k, v, page, pages=2 * ((kv_len + page - 1) // page) + 3)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=heads != kv_heads)
    reference = torch.ops.spyre.paged_attention(q, kp, vp, slots)
    torch.spyre.reset_fallback_counts()
    got = torch.ops.spyre.paged_attention(q.to("spyre"), kp.to("spyre"), vp.to("spyre"), slots.to("spyre"))
    assert got.shape == (b, heads, q_len, dim) and got.dtype == dtype
    assert torch.spyre.fallback_counts() == {}
    torch.testing.assert_close(got.cpu().float(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(reference.float(), want, atol=tol, rtol=tol)


def test_sequences_of_different_lengths_take_a_padding_mask_and_a_scale():
    torch.manual_seed(1)
    q = torch.randn(2, 4, 1, 64)
    k, v = torch.randn(2, 2, 40, 64), torch.randn(2, 2, 40, 64)
    kp, vp, slots = paged_cache(k, v, page=16, pages=8)
    valid = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    valid[1, ..., 25:] = False  # the second sequence has 25 tokens
    slots[1, 25:] = 0  # (its padding names any row: masked)
    want = torch.cat([
        F.scaled_dot_product_attention(q[:1], k[:1], v[:1], scale=0.3, enable_gqa=True),
        F.scaled_dot_product_attention(q[1:], k[1:, :, :25], v[1:, :, :25], scale=0.3, enable_gqa=True)])
    for mask in (valid, torch.where(valid, 0.0, float("-inf"))):
        got = torch.ops.spyre.paged_attention(q.to("spyre"), kp.to("spyre"), vp.to("spyre"), slots.to("spyre"),
                                              mask.to("spyre"), scale=0.3)
        torch.testing.assert_close(got.cpu(), want, atol=2e-5, rtol=2e-5)


def test_the_kernel_reads_the_sequences_rows_not_the_pool():
    import spyre_sim

    q = torch.randn(1, 32, 1, 128).half()
    k, v = torch.randn(1, 8, 1024, 128).half(), torch.randn(1, 8, 1024, 128).half()
    kp, vp, slots = paged_cache(k, v, page=64, pages=64)  # a pool 4x the sequence
    args = [t.to("spyre") for t in (q, kp, vp, slots)]
    r = spyre_sim.run(lambda *a: torch.ops.spyre.paged_attention(*a), *args)
    rows = 2 * 1024 * 8 * 128 * 2  # keys and values of the sequence, fp16
    assert r["metrics"]["kernels"] == 1
    assert rows <= r["metrics"]["dram_read_bytes"] < 1.05 * rows
    # As fast as the same decode step over a contiguous cache, give or take a few percent.
    c = spyre_sim.run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v)
    assert r["metrics"]["time_us"] < 1.1 * c["metrics"]["time_us"]


def test_a_slot_outside_the_pool_is_a_device_fault_and_the_device_keeps_working():
    q, kp = torch.randn(1, 2, 1, 16, device="spyre"), torch.zeros(4, 8, 2, 16, device="spyre")
    slots = torch.tensor([[0, 5, 32]], dtype=torch.int32, device="spyre")
    out = torch.ops.spyre.paged_attention(q, kp, kp, slots)
    with pytest.raises(RuntimeError, match=r"spyre::paged_attention.*DMA gather index 32 \(entry 2 of 3\) is outside "
                                           r"the table's rows \[0, 32\)"):
        out.cpu()
    ok = torch.ops.spyre.paged_attention(q, kp + 1, kp + 1, slots.clamp(max=31))
    assert torch.equal(ok.cpu(), torch.ones(1, 2, 1, 16))


def test_bad_arguments_say_what_was_expected():
    q, kp = torch.randn(1, 2, 1, 16, device="spyre"), torch.zeros(4, 8, 2, 16, device="spyre")
    with pytest.raises(RuntimeError, match=r"slots must be int32 \[batch, kv_len\].*found Long"):
        torch.ops.spyre.paged_attention(q, kp, kp, torch.zeros(1, 3, dtype=torch.long, device="spyre"))
    with pytest.raises(RuntimeError, match=r"key_cache must be \[slots, kv_heads, dim\] or \[pages, page_size"):
        torch.ops.spyre.paged_attention(q, kp[0, 0], kp, torch.zeros(1, 3, dtype=torch.int32, device="spyre"))
    with pytest.raises(RuntimeError, match=r"3 query heads do not group over 2"):
        torch.ops.spyre.paged_attention(torch.randn(1, 3, 1, 16, device="spyre"), kp, kp,
                                        torch.zeros(1, 3, dtype=torch.int32, device="spyre"))
    with pytest.raises(RuntimeError, match=r"does not broadcast"):
        torch.ops.spyre.paged_attention(q, kp, kp, torch.zeros(1, 3, dtype=torch.int32, device="spyre"),
                                        torch.zeros(1, 1, 1, 4, device="spyre"))


def test_meta_tensors_give_the_output_shape():
    q = torch.empty(2, 8, 1, 64, device="meta", dtype=torch.float16)
    kp = torch.empty(10, 16, 2, 64, device="meta", dtype=torch.float16)
    out = torch.ops.spyre.paged_attention(q, kp, kp, torch.empty(2, 30, dtype=torch.int32, device="meta"))
    assert out.shape == (2, 8, 1, 64) and out.dtype == torch.float16 and out.device.type == "meta"
