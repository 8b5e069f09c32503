"""Fused attention's modelled device time against its bounds (backend/README.md).

    tools/dev run python3 backend/bench/attention_bench.py

Each case runs scaled_dot_product_attention once to compile, then once measured
(`spyre_sim.run`): the simulated device time of that one launch, its DRAM bytes, and its
roofline bound from the run report, the one definition the reports use
(include/spyre/cost/roofline.h): the larger of its FLOPs at the fp16 peak and its least
DRAM bytes (query, key, value read once, output and logsumexp written once) at the
memory model's best time for that read/write mix. A decode step's bound is its KV cache
streamed once.
"""

import torch
import torch.nn.functional as F

import spyre_sim

CASES = [  # name, batch, q heads, kv heads, query length, kv length, head dim, causal
    ("prefill 1x1024, 16 heads of 64, causal", 1, 16, 16, 1024, 1024, 64, True),
    ("prefill 1x1024, 16 heads of 64", 1, 16, 16, 1024, 1024, 64, False),
    ("prefill 1x512, 32/8 heads of 128 (GQA), causal", 1, 32, 8, 512, 512, 128, True),
    ("decode 1 query, KV 4096, 32 heads of 128", 1, 32, 32, 1, 4096, 128, False),
    ("decode 1 query, KV 4096, 32/8 heads of 128 (GQA)", 1, 32, 8, 1, 4096, 128, False),
]


def measure(q, k, v, causal):
    r = spyre_sim.run(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]), q, k, v)
    m = r["metrics"]
    least = sum(kernel["min_dram_bytes"] for kernel in r["kernels"])
    return m["time_us"], m["roofline_fraction"] * m["time_us"], m["dram_read_bytes"] + m["dram_write_bytes"], least


def main():
    print(f"{'case':<52} {'time us':>9} {'bound us':>9} {'x bound':>8} {'MB moved':>9} {'least MB':>9}")
    for name, b, h, hk, L, S, e, causal in CASES:
        opts = dict(dtype=torch.float16)
        q, k, v = (torch.randn(b, h, L, e, **opts), torch.randn(b, hk, S, e, **opts),
                   torch.randn(b, hk, S, e, **opts))
        us, bound, moved, least = measure(q, k, v, causal)
        print(f"{name:<52} {us:9.1f} {bound:9.1f} {us / bound:8.2f} {moved / 1e6:9.2f} {least / 1e6:9.2f}")


if __name__ == "__main__":
    main()
