"""Kernels on what-if chips: plans follow the config, so GEMM, pointwise and softmax
kernels must compile and match the CPU on arrays, corelets, SIMD depths, dataflows and
scratchpads other than the default chip's (the configs of backend/bench/predictions.py).
Each config runs in a fresh process on the functional device (the data is the same on
the timed one: tests/sim/executor_test.cpp)."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

WHAT_IFS = {
    "16x16 arrays": ["cores.compute_array.rows=16", "cores.compute_array.cols=16"],
    "4 corelets": ["cores.corelets=4"],
    "SIMD depth 4": ["cores.compute_array.simd_depth.fp16=4", "cores.compute_array.simd_depth.bf16=4"],
    "ws dataflow": ["cores.compute_array.dataflow=ws"],
    "quarter scratchpad": ["cores.scratchpad.bytes=512 KiB", "cores.scratchpad.usable_bytes=409 KiB"],
}

PROGRAM = """
import spyre_sim, torch
from torch.testing import assert_close
spyre_sim.configure(overrides={overrides!r}, devices=1, mode="functional")  # the default chip, changed
torch.manual_seed(0)
for dtype, tol in ((torch.float16, 2e-2), (torch.float32, 1e-3)):
    for m, n, k in ((64, 64, 64), (300, 200, 1000), (4097, 33, 515), (1, 512, 384)):
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        got = (a.to("spyre") @ b.to("spyre")).cpu()
        assert_close(got.double(), a.double() @ b.double(), rtol=tol, atol=tol * k ** 0.5)
    x, y = torch.randn(100003).to(dtype), torch.randn(100003).to(dtype)
    assert torch.equal((x.to("spyre") + y.to("spyre")).cpu(), x + y)
    s = torch.randn(257, 1000).to(dtype)
    assert_close(torch.softmax(s.to("spyre"), -1).cpu(), torch.softmax(s.float(), -1).to(dtype), rtol=tol, atol=tol)
assert torch.spyre.fallback_counts() == {{}}, torch.spyre.fallback_counts()
print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WHAT_IFS))
def test_kernels_compile_and_match_the_cpu_on_a_what_if_chip(name):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_SIM_")}
    env["PYTHONPATH"] = str(REPO / "python")
    code = PROGRAM.format(overrides=WHAT_IFS[name])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
