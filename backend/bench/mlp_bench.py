"""The fused feed-forward kernel (`torch.ops.spyre.mlp`) against the separate kernels it
replaces, in modelled device time, and which of the two the op runs.

    tools/dev run python3 backend/bench/mlp_bench.py [--quick]

Each row: the op as called (it runs the fused kernel unless the compiler's estimate
calls the separate kernels faster, then those) and the separate kernels called one by
one. fp16, the default chip (or SPYRE_SIM_CONFIG's). About a minute (--quick: seconds).
Figures go in backend/README.md.
"""

import argparse

import torch

import spyre_sim

# rows, d, hidden, gated, norm, projection before
SHAPES = [
    (512, 4096, 7168, True, "rms_norm", False),   # Llama-3-8B prefill, one of 2 tensor-parallel cards
    (512, 4096, 4096, False, "layer_norm", False),
    (512, 2048, 5632, True, "rms_norm", True),    # compile_bench's Llama block
    (512, 2048, 8192, False, "layer_norm", True),  # a GPT-2-shaped block
    (1, 4096, 14336, True, "rms_norm", False),    # Llama-3-8B decode step
]
QUICK = [(64, 256, 512, True, "rms_norm", False), (64, 256, 1024, False, "layer_norm", True)]


def row(m, d, h, gated, norm_kind, proj):
    torch.manual_seed(0)

    def t(*shape, scale=1.0):
        return (torch.randn(*shape) * scale).half().to("spyre")

    x = t(m, d, scale=0.5)
    w1, w2 = t(h, d, scale=d ** -0.5), t(d, h, scale=h ** -0.5)
    w3 = t(h, d, scale=d ** -0.5) if gated else None
    b1 = None if gated else t(h, scale=0.1)
    nw = torch.ones(d).half().to("spyre")
    nb = torch.zeros(d).half().to("spyre") if norm_kind == "layer_norm" else None
    norm = (norm_kind, nw, nb, 1e-6)
    act = "silu" if gated else "gelu_tanh"
    pin, wp = (t(m, d, scale=0.5), t(d, d, scale=d ** -0.5)) if proj else (None, None)

    class Op(torch.nn.Module):  # the residual is x, or x1 with a projection
        def forward(self, a):
            return torch.ops.spyre.mlp(a, w1, b1, act, w2, None, None if proj else a, *norm, pin, wp, None, w3)

    class Separate(torch.nn.Module):
        def forward(self, a):
            if proj:
                a = torch.ops.spyre.matmul_epilogue(pin, wp.t(), None, "", a, "add")
            hid = (torch.ops.spyre.linear_gated(a, w1, w3, act, *norm) if gated
                   else torch.ops.spyre.matmul_epilogue(a, w1.t(), b1, act, None, "add", *norm))
            return torch.ops.spyre.matmul_epilogue(hid, w2.t(), None, "", a, "add")

    op, sep = spyre_sim.run(Op(), x), spyre_sim.run(Separate(), x)
    fused = len(op["kernels"]) == 1 and op["kernels"][0]["name"].startswith("spyre::mlp")
    what = ("gated, " if gated else "") + norm_kind + (", projection" if proj else ", residual")
    print(f"{m:5} {d:5} {h:6}  {what:34} {op['metrics']['time_us']:9.1f} {sep['metrics']['time_us']:12.1f}  "
          f"{'fused' if fused else 'separate'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = parser.parse_args()
    print(f"{'rows':>5} {'d':>5} {'hidden':>6}  {'':34} {'op us':>9} {'separate us':>12}  runs")
    for shape in QUICK if args.quick else SHAPES:
        row(*shape)


if __name__ == "__main__":
    main()
