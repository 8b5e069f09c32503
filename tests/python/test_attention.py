"""scaled_dot_product_attention on spyre: one fused device kernel per call (PyTorch's
SDPA picks the overrideable backend), against a float64 CPU reference: causal, boolean
and additive masks, grouped-query heads, a decode step, rows with every key masked;
the logsumexp it saves; the backward (composed of device ops); torch.compile."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=4e-3, rtol=4e-3),
       torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def reference(q, k, v, mask=None, causal=False, scale=None):
    """softmax(scale q k^T + mask) v in float64, fully masked rows giving 0."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s + (torch.where(mask, 0.0, -math.inf) if mask.dtype == torch.bool else mask.double())
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.nan_to_num(neginf=0).unsqueeze(-1))
    return (p @ v).nan_to_num(0), lse


def launches():
    torch.spyre.synchronize()
    return torch.spyre.report()["launches"]


def spyre(*tensors):
    return [None if t is None else t.to("spyre") for t in tensors]


CASES = [  # batch, q heads, kv heads, L, S, head dim, value dim, causal, mask
    (1, 2, 2, 16, 16, 8, 8, False, None),
    (2, 4, 2, 37, 53, 16, 24, False, None),
    (1, 2, 2, 300, 300, 64, 64, True, None),
    (1, 1, 1, 520, 260, 32, 32, True, None),
    (2, 4, 4, 40, 70, 32, 32, False, "bool"),
    (2, 2, 2, 33, 65, 16, 16, False, "float"),
    (1, 8, 2, 1, 100, 64, 64, False, None),
    (1, 8, 2, 3, 100, 64, 64, True, None),
    (1, 2, 1, 5, 9, 256, 128, False, "bool"),
    (1, 2, 2, 1024, 1024, 32, 32, True, None),  # one item per core: key blocks shared over the ring
    (1, 4, 2, 512, 512, 32, 32, False, "float"),  # the same with grouped heads and a mask
    (1, 2, 1, 512, 512, 32, 32, True, None),  # one block per core: key block 1 shared by the 2 that need it
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(str(x) for x in c))
def test_sdpa_is_one_fused_kernel_and_matches_float64(dtype, case):
    b, h, hk, L, S, e, ev, causal, mask_kind = case
    torch.manual_seed(hash(case) % 1000)
    q, k, v = torch.randn(b, h, L, e), torch.randn(b, hk, S, e), torch.randn(b, hk, S, ev)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(b, 1, L, S) > 0.3
    elif mask_kind == "float":
        mask = (torch.randn(b, h, 1, S) * 2).to(dtype)  # broadcast over the queries
    want, _ = reference(q, k, v, mask, causal)
    qs, ks, vs, ms = spyre(q, k, v, mask)
    if mask_kind == "float":  # an additive mask already on the device: nothing but the kernel
        before = launches()
    torch.spyre.reset_fallback_counts()
    got = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=ms, is_causal=causal, enable_gqa=h != hk)
    if mask_kind == "float":
        assert launches() - before == 1
    assert torch.spyre.fallback_counts() == {}
    assert got.shape == (b, h, L, ev) and got.dtype == dtype and got.device.type == "spyre"
    assert_close(got.cpu().double(), want, **TOL[dtype])


def test_the_overrideable_op_returns_the_logsumexp_and_flash_layout():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 3, 20, 16), torch.randn(2, 3, 30, 16), torch.randn(2, 3, 30, 8)
    out, lse, *_ = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*spyre(q, k, v), scale=0.3)
    want, want_lse = reference(q, k, v, scale=0.3)
    assert_close(out.cpu().double(), want, **TOL[torch.float32])
    assert_close(lse.cpu().double(), want_lse, **TOL[torch.float32])
    assert lse.dtype == torch.float32
    # [B, H, L, E] stored as [B, L, H, E]: heads side by side, as the next projection wants them
    assert out.transpose(1, 2).is_contiguous()


def test_rows_with_every_key_masked_give_zeros():
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    mask = torch.ones(1, 1, 4, 6, dtype=torch.bool)
    mask[..., 1, :] = False
    got = F.scaled_dot_product_attention(*spyre(q, k, v, mask))
    want, _ = reference(q, k, v, mask)
    assert_close(got.cpu().double(), want, **TOL[torch.float32])
    assert torch.count_nonzero(got[0, :, 1].cpu()) == 0


def test_a_decode_step_streams_the_kv_cache_once():
    # One query per head against 512 cached keys: the kernel reads K and V once (plus
    # the query), not once per head of a group.
    q, k, v = torch.randn(1, 8, 1, 64), torch.randn(1, 2, 512, 64), torch.randn(1, 2, 512, 64)
    qs, ks, vs = spyre(q, k, v)
    torch.spyre.synchronize()
    before = torch.spyre.report()
    got = F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
    torch.spyre.synchronize()
    after = torch.spyre.report()
    loaded = sum(c["dma_load_bytes"] for c in after["cores"]) - sum(c["dma_load_bytes"] for c in before["cores"])
    assert loaded == 4 * (k.numel() + v.numel() + q.numel())
    assert_close(got.cpu().double(), reference(q, k, v)[0], **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("causal,mask_kind,gqa", [(False, None, False), (True, None, True), (False, "float", False)])
def test_backward_matches_float64_autograd(dtype, causal, mask_kind, gqa):
    torch.manual_seed(3)
    b, h, hk, L, S, e = 2, 4, 2 if gqa else 4, 24, 24 if causal else 40, 16
    q, k, v = torch.randn(b, h, L, e), torch.randn(b, hk, S, e), torch.randn(b, hk, S, e)
    mask = torch.randn(b, 1, L, S) if mask_kind == "float" else None
    grad = torch.randn(b, h, L, e)
    leaves = [t.to(dtype).double().requires_grad_() for t in (q, k, v)] + (
        [mask.to(dtype).double().requires_grad_()] if mask is not None else [])
    want, _ = reference(*leaves[:3], leaves[3] if mask is not None else None, causal)
    want.backward(grad.to(dtype).double())
    dev = [t.to(dtype).to("spyre").requires_grad_() for t in (q, k, v)] + (
        [mask.to(dtype).to("spyre").requires_grad_()] if mask is not None else [])
    got = F.scaled_dot_product_attention(*dev[:3], attn_mask=dev[3] if mask is not None else None,
                                         is_causal=causal, enable_gqa=gqa)
    torch.spyre.reset_fallback_counts()
    got.backward(grad.to(dtype).to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    for name, x, y in zip("qkvm", dev, leaves):
        assert_close(x.grad.cpu().double(), y.grad, **tol, msg=lambda m: f"grad of {name}: {m}")


def test_compiled_attention_matches_eager():
    torch.manual_seed(4)
    q, k, v = spyre(torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8))

    def block(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, 16, 16) * 2

    got = torch.compile(block, backend="spyre")(q, k, v)
    assert_close(got.cpu(), block(q, k, v).cpu(), atol=1e-5, rtol=1e-5)
