"""What torch.compile(backend="spyre") buys on the default chip: eager against compiled
for a few real blocks, in modelled device time, kernels launched and DRAM bytes.

    tools/dev run python3 backend/bench/compile_bench.py [--quick] [--kernels]

--kernels adds each compiled block's kernels, one line each (modelled time, DRAM bytes
moved against the op's least, % of its own roofline bound).

Figures (and the command) go in backend/README.md. Modelled times are deterministic;
the script takes about a minute (--quick: small shapes, a few seconds).
"""

import argparse
import sys

import torch

import spyre_sim
from spyre_sim.models import Gpt2Block, GptMlp, LlamaBlock, SwiGLU, repeat_kv


def measure(model, *xs):
    r = spyre_sim.run(model, *xs)
    m = r["metrics"]
    # The block's roofline bound: the sum of its kernels' bounds (each its FLOPs at the
    # peak or its op's least DRAM bytes; include/spyre/cost/roofline.h), from the report.
    return (m["time_us"], m["kernels"], (m["dram_read_bytes"] + m["dram_write_bytes"]) / 1e6, m["cpu_fallbacks"],
            m["roofline_fraction"] * m["time_us"], r["kernels"])


def print_kernels(kernels):
    """The report's kernel rows in launch order: modelled time, DRAM bytes moved against
    the op's least, and the fraction of the kernel's own roofline bound."""
    for k in kernels:
        moved = (k["dram_read_bytes"] + k["dram_write_bytes"]) / 1e6
        launches = f" x{int(k['launches'])}" if k["launches"] > 1 else ""
        print(f"    {k['name'] + launches:60} {k['time_ps'] / 1e6:9.1f} us {moved:7.1f} MB "
              f"(least {k['min_dram_bytes'] / 1e6:6.1f}) {k['roofline_fraction'] * 100:5.1f}% of its bound")


class RepeatKvDecode(torch.nn.Module):
    """One decode step's attention with grouped-query heads repeated first (Llama's
    reference code, Hugging Face's repeat_kv): q [b, heads, 1, d] against a KV cache."""

    def forward(self, q, k, v):
        groups = q.shape[1] // k.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke test)")
    parser.add_argument("--kernels", action="store_true", help="list each compiled block's kernels")
    args = parser.parse_args()
    tokens, d, hidden, heads = (64, 256, 512, 4) if args.quick else (512, 2048, 5632, 16)
    torch.manual_seed(0)
    cache, hd = (64, 32) if args.quick else (4096, 128)
    x_shape = [(1, tokens, d)]
    blocks = {  # name: (module, the shapes of its inputs)
        f"MLP {tokens}x{d}->{hidden}": GptMlp(d, hidden),
        f"RMSNorm+SwiGLU {tokens}x{d}->{hidden}": SwiGLU(d, hidden),
        f"TransformerEncoderLayer {tokens}x{d}, {heads} heads": torch.nn.TransformerEncoderLayer(
            d, heads, hidden, batch_first=True, activation="gelu"),
        f"Llama block {tokens}x{d}, {heads}/{heads // 4} heads": LlamaBlock(d, heads, heads // 4, hidden, tokens),
        "Llama block, Hugging Face's RMSNorm, repeat_kv": LlamaBlock(d, heads, heads // 4, hidden, tokens,
                                                                     written_out=True),
        f"GPT-2 block {tokens}x{d}, {heads} heads": Gpt2Block(d, heads, 4 * d),
        f"GPT-2 block, Hugging Face's gelu_new": Gpt2Block(d, heads, 4 * d, written_gelu=True),
        f"GQA decode step, KV repeated, cache {cache}": (RepeatKvDecode(), [(1, 4 * heads // 2, 1, hd),
                                                                            (1, heads // 2, cache, hd),
                                                                            (1, heads // 2, cache, hd)]),
    }
    print(f"torch.compile(backend='spyre') against eager, fp16, on '{torch.spyre.report()['config']['name']}' "
          "(modelled device time of one call)")
    print(f"{'block':46} {'eager us':>9} {'compiled us':>11} {'speed-up':>8} {'kernels':>9} {'DRAM MB':>15} "
          f"{'bound us':>9} {'compiled/bound':>14}")
    for name, entry in blocks.items():
        block, shapes = entry if isinstance(entry, tuple) else (entry, x_shape)
        block = block.half().eval().to("spyre")
        xs = [torch.randn(shape).half().to("spyre") for shape in shapes]
        torch._dynamo.reset()
        eager = measure(block, *xs)
        compiled = measure(torch.compile(block, backend="spyre"), *xs)
        if eager[3] or compiled[3]:
            print(f"{name}: CPU fallbacks eager {eager[3]}, compiled {compiled[3]}", file=sys.stderr)
        # The bound of the block's ops as the eager run launches them (compiled kernels
        # fuse ops, so their own bounds sum lower).
        print(f"{name:46} {eager[0]:9.1f} {compiled[0]:11.1f} {eager[0] / compiled[0]:7.2f}x "
              f"{eager[1]:4d}->{compiled[1]:<4d} {eager[2]:7.1f}->{compiled[2]:<7.1f} {eager[4]:9.1f} "
              f"{compiled[0] / eager[4]:13.2f}x")
        if args.kernels:
            print_kernels(compiled[5])


if __name__ == "__main__":
    main()
