"""Fused attention's modelled device time against its bounds (backend/README.md).

    tools/dev run python3 backend/bench/attention_bench.py

Each case runs scaled_dot_product_attention once to compile, then once measured: the
simulated device time of that one launch, its DRAM bytes, and two bounds on the default
chip: the FLOPs at the fp16 peak and the least DRAM bytes (query, key, value read once,
output written once) at the one-directional 150 GB/s the calibration reproduces. A
decode step's bound is its KV cache streamed once.
"""

import torch
import torch.nn.functional as F

import spyre_sim  # noqa: F401

PEAK_FLOPS = 98.3e12  # fp16, 32 cores (spyre-kernel-bench's header)
DRAM = 150e9          # one-directional, the calibrated figure

CASES = [  # name, batch, q heads, kv heads, query length, kv length, head dim, causal
    ("prefill 1x1024, 16 heads of 64, causal", 1, 16, 16, 1024, 1024, 64, True),
    ("prefill 1x1024, 16 heads of 64", 1, 16, 16, 1024, 1024, 64, False),
    ("prefill 1x512, 32/8 heads of 128 (GQA), causal", 1, 32, 8, 512, 512, 128, True),
    ("decode 1 query, KV 4096, 32 heads of 128", 1, 32, 32, 1, 4096, 128, False),
    ("decode 1 query, KV 4096, 32/8 heads of 128 (GQA)", 1, 32, 8, 1, 4096, 128, False),
]


def measure(q, k, v, causal):
    F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    torch.spyre.synchronize()
    before = torch.spyre.report()
    F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    torch.spyre.synchronize()
    after = torch.spyre.report()
    moved = sum(c["dma_load_bytes"] + c["dma_store_bytes"] for c in after["cores"]) - sum(
        c["dma_load_bytes"] + c["dma_store_bytes"] for c in before["cores"])
    return (after["elapsed_ps"] - before["elapsed_ps"]) * 1e-6, moved


def main():
    print(f"{'case':<52} {'time us':>9} {'bound us':>9} {'x bound':>8} {'MB moved':>9} {'least MB':>9}")
    for name, b, h, hk, L, S, e, causal in CASES:
        opts = dict(dtype=torch.float16, device="spyre")
        q, k, v = (torch.randn(b, h, L, e, **opts), torch.randn(b, hk, S, e, **opts),
                   torch.randn(b, hk, S, e, **opts))
        us, moved = measure(q, k, v, causal)
        least = 2 * (q.numel() * 2 + k.numel() + v.numel())  # fp16: q, k, v read, out written
        pairs = L * S - (L * (L - 1) // 2 if causal else 0)  # (query, key) scores computed
        flops = 4 * b * h * pairs * e
        bound = max(flops / PEAK_FLOPS, least / DRAM) * 1e6
        print(f"{name:<52} {us:9.1f} {bound:9.1f} {us / bound:8.2f} {moved / 1e6:9.2f} {least / 1e6:9.2f}")


if __name__ == "__main__":
    main()
