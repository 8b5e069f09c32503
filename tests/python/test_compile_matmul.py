"""torch.compile(backend="spyre") of the matmul kernels' fusions: LayerNorm and RMSNorm in
a matmul's prologue, a feed-forward half as one spyre::mlp kernel (plain, gated, with
the projection before it), residual adds in the epilogue, linears of one input in one
kernel (linear_concat), gated pairs (linear_gated) and rotary embeddings, each against
its separate kernels and the CPU. (Pointwise chains and the rest: test_compile.py.)"""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import spyre_sim
from test_compile import compiled_run, kernels, tol
from test_pointwise import FLOATS, rand

aten = torch.ops.aten

def _norm_params(kind, k, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w = (torch.rand(k, generator=g) + 0.5).to(dtype).to("spyre")
    b = (torch.rand(k, generator=g) - 0.5).to(dtype).to("spyre") if kind == "layer_norm" else None
    return w, b


def _normed(kind, a, w, b, eps):
    """The norm by its own device kernel, as eager runs it."""
    if kind == "layer_norm":
        return F.layer_norm(a, (a.shape[-1],), w, b, eps)
    return torch.ops.spyre.rms_norm(a, [a.shape[-1]], w, eps)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,n,k", [(37, 70, 50), (300, 200, 1100), (520, 96, 64)], ids=str)
@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_a_norm_prologue_gives_the_values_of_the_norm_kernel_then_the_matmul(kind, dtype, m, n, k):
    # Edge tiles, K in several chunks and statistics in several pieces (k = 1100), two
    # tiles per core (m = 520) on the CI chip; rows with a large mean, which the norm
    # must take out before squaring. The kernel normalises A's panels with the norm
    # kernel's operations, so the product is the product of the norm kernel's output
    # (to the accumulation order: the plans may differ).
    a = (rand((m, k), dtype, 51) + 30).to("spyre")
    w, b = _norm_params(kind, k, dtype, 52)
    wt = rand((n, k), dtype, 53).to("spyre")
    up = rand((n, k), dtype, 54).to("spyre")
    bias = rand((n,), dtype, 55).to("spyre")
    eps = 1e-5 if kind == "layer_norm" else float(torch.tensor(1e-6, dtype=dtype))
    torch.spyre.reset_fallback_counts()
    h = _normed(kind, a, w, b, eps)
    norm = (kind, w, b, eps)
    close = dict(tol(dtype), atol=max(tol(dtype)["atol"], 1e-4))  # (fp32 sums of 1100 products, reordered)
    got = torch.ops.spyre.matmul_epilogue(a, wt.t(), bias, "gelu_tanh", None, "add", *norm)
    assert_close(got.cpu(), torch.ops.spyre.matmul_epilogue(h, wt.t(), bias, "gelu_tanh").cpu(), **close)
    got = torch.ops.spyre.linear_concat(a, [wt, up], *norm)
    assert_close(got.cpu(), torch.ops.spyre.linear_concat(h, [wt, up]).cpu(), **close)
    got = torch.ops.spyre.linear_gated(a, wt, up, "silu", *norm)
    assert_close(got.cpu(), torch.ops.spyre.linear_gated(h, wt, up, "silu").cpu(), **close)
    assert torch.spyre.fallback_counts() == {}
    # And against the CPU's norm and product in fp32.
    ac, wc = a.cpu().float(), w.cpu().float()
    if kind == "layer_norm":
        ref = F.layer_norm(ac, (k,), wc, b.cpu().float(), eps)
    else:
        ref = ac * torch.rsqrt(ac.pow(2).mean(-1, keepdim=True) + eps) * wc
    want = F.gelu(ref @ wt.cpu().float().t() + bias.cpu().float(), approximate="tanh")
    got = torch.ops.spyre.matmul_epilogue(a, wt.t(), bias, "gelu_tanh", None, "add", *norm).cpu().float()
    # (fp32: x + 30 keeps 5 fewer bits of x; the CPU's norm, by another algorithm, differs
    # by 4e-5 in the normalised values, 4e-3 after the 1100-long sums.)
    assert_close(got, want, **{torch.float32: dict(atol=1e-2, rtol=1e-3), torch.float16: dict(atol=5e-2, rtol=1e-2),
                               torch.bfloat16: dict(atol=4e-1, rtol=4e-2)}[dtype])


def test_a_norm_prologue_checks_its_operands():
    a = torch.ones(4, 8, device="spyre")
    w = torch.ones(3, 8, device="spyre")
    with pytest.raises(RuntimeError, match="unknown norm 'batch_norm'"):
        torch.ops.spyre.linear_concat(a, [w], "batch_norm")
    with pytest.raises(RuntimeError, match=r"the norm weight must be 8 float values on spyre:0, got shape \[7\]"):
        torch.ops.spyre.linear_gated(a, w, w, "silu", "layer_norm", torch.ones(7, device="spyre"))
    with pytest.raises(RuntimeError, match="an RMSNorm takes no bias"):
        torch.ops.spyre.matmul_epilogue(a, w.t(), None, "", None, "add", "rms_norm", torch.ones(8, device="spyre"),
                                        torch.ones(8, device="spyre"), 1e-6)
    with pytest.raises(RuntimeError, match="a norm weight or bias without a norm"):
        torch.ops.spyre.linear_concat(a, [w], "", torch.ones(8, device="spyre"))
    # The device keeps working.
    assert_close(torch.ops.spyre.linear_concat(a, [w], "layer_norm", None, None, 1e-5).cpu(), torch.zeros(4, 3))


def test_a_norm_prologue_that_would_crowd_out_the_tiling_runs_the_norms_kernel_first():
    # K = 65536 on the CI chip: the prologue's buffers do not fit beside the matmul's own
    # tiling (tests/compiler/matmul_test.cpp), so the op runs the norm's kernel and then
    # the plain kernel: the same values, no fallback.
    a = rand((512, 65536), torch.float16, 61).to("spyre")
    w = rand((512, 65536), torch.float16, 62).to("spyre")
    g, _ = _norm_params("rms_norm", 65536, torch.float16, 63)
    eps = float(torch.tensor(1e-6, dtype=torch.float16))
    torch.spyre.reset_fallback_counts()
    names, _ = kernels(lambda: torch.ops.spyre.linear_concat(a, [w], "rms_norm", g, None, eps))
    assert names == ["aten::rms_norm", "spyre::linear_concat"]
    want = torch.ops.spyre.linear_concat(torch.ops.spyre.rms_norm(a, [65536], g, eps), [w])
    assert_close(torch.ops.spyre.linear_concat(a, [w], "rms_norm", g, None, eps).cpu(), want.cpu(), atol=0, rtol=0)
    assert torch.spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_a_gpt2_blocks_layer_norms_run_in_its_matmuls_prologues(dtype):
    from spyre_sim.models import Gpt2Block  # noqa: PLC0415

    torch._dynamo.reset()
    torch.manual_seed(3)
    block = Gpt2Block(64, 4, 256)
    with torch.no_grad():
        for ln in (block.ln1, block.ln2):
            ln.weight.copy_(torch.rand(64) + 0.5)
            ln.bias.copy_(torch.rand(64) - 0.5)
    x = rand((2, 16, 64), dtype, 19)
    want = block.float()(x.float()).to(dtype)
    block = block.to(dtype).to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(block, x)
        assert_close(got.cpu(), want, **{torch.float32: dict(atol=1e-4, rtol=1e-4),
                                         torch.float16: dict(atol=5e-3, rtol=5e-3)}[dtype])
        names, _ = kernels(compiled, x.to("spyre"))
    # The QKV projection with LN1 in its prologue, attention, and the rest in one kernel:
    # the output projection and its residual, LN2, fc1, GELU, fc2 and the second residual.
    assert names == ["spyre::matmul[layer_norm,bias]", "aten::_scaled_dot_product_fused_attention_overrideable",
                     "spyre::mlp[linear,bias,residual,layer_norm,gelu_tanh,residual]"]


def _mlp_unfused(a, w1, b1, act, w2, b2, residual, *norm):
    """The feed-forward half as the two matmul kernels it replaces."""
    h = torch.ops.spyre.matmul_epilogue(a, w1.t(), b1, act, None, "add", *norm)
    return torch.ops.spyre.matmul_epilogue(h, w2.t(), b2, "", residual, "add")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,d,h", [(37, 64, 200), (300, 200, 1000), (1, 96, 256)], ids=str)
@pytest.mark.parametrize("kind", ["", "layer_norm", "rms_norm"])
def test_an_mlp_in_one_kernel_equals_its_two_matmul_kernels(kind, dtype, m, d, h):
    # On the CI chip's 4 cores: hidden slices of 56 and 256 units (the last core's
    # shorter), K steps and output chunks with ragged ends, one row (a decode step: the
    # reduce-scatter's segments of the other cores are empty). The hidden activation is
    # rounded as the first kernel rounds it; the second product's fp32 sum runs in
    # another order (each core's slice, then the ring's), so the values agree to that.
    a = (rand((m, d), dtype, 71) + (3 if kind else 0)).to("spyre")
    w1, b1 = rand((h, d), dtype, 72).to("spyre"), rand((h,), dtype, 73).to("spyre")
    w2, b2 = rand((d, h), dtype, 74).to("spyre"), rand((d,), dtype, 75).to("spyre")
    residual = rand((m, d), dtype, 76).to("spyre")
    norm = ()
    if kind:
        w, b = _norm_params(kind, d, dtype, 77)
        norm = (kind, w, b, 1e-5 if kind == "layer_norm" else float(torch.tensor(1e-6, dtype=dtype)))
    torch.spyre.reset_fallback_counts()
    names, _ = kernels(lambda: torch.ops.spyre.mlp(a, w1, b1, "gelu_tanh", w2, b2, residual, *norm))
    assert names == ["spyre::mlp[" + (kind + "," if kind else "") + "gelu_tanh,residual]"]
    # The CPU's fp32 reference, the hidden activation rounded to the dtype as both kernels
    # round it.
    x = a.cpu().float()
    if kind == "layer_norm":
        x = F.layer_norm(x, (d,), norm[1].cpu().float(), norm[2].cpu().float(), norm[3])
    elif kind == "rms_norm":
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm[3]) * norm[1].cpu().float()
    hid = F.gelu(x @ w1.cpu().float().t() + b1.cpu().float(), approximate="tanh").to(dtype).float()
    want = hid @ w2.cpu().float().t() + b2.cpu().float() + residual.cpu().float()
    # Both kernels' fp32 sums run in their own orders (the fused one: each core's slice,
    # then the ring's), and a hidden value a rounding step apart moves y by w2 times that
    # step: tolerances in rounding steps of y's largest values (2^-10 fp16, 2^-7 bf16),
    # which the two kernels meet alike.
    scale = want.abs().max().item()
    close = dict(atol={torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype] * scale, rtol=0)
    got = torch.ops.spyre.mlp(a, w1, b1, "gelu_tanh", w2, b2, residual, *norm).cpu().float()
    assert_close(got, want, **close)
    assert_close(_mlp_unfused(a, w1, b1, "gelu_tanh", w2, b2, residual, *norm).cpu().float(), want, **close)
    # Without the biases, the activation and the residual: against the two kernels.
    got = torch.ops.spyre.mlp(a, w1, None, "", w2, None, None, *norm)
    assert_close(got.cpu().float(), _mlp_unfused(a, w1, None, "", w2, None, None, *norm).cpu().float(), **close)
    assert torch.spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,d,h", [(37, 64, 200), (300, 200, 1000), (1, 96, 256)], ids=str)
@pytest.mark.parametrize("kind", ["", "rms_norm"])
def test_a_gated_mlp_in_one_kernel_equals_linear_gated_then_the_down_projection(kind, dtype, m, d, h):
    # SwiGLU's feed-forward half: silu(x @ w1.t()) * (x @ w3.t()) @ w2.t() + residual, on
    # the CI chip's 4 cores as above (hidden slices of 56 and 256 units, two fp32
    # accumulators a core). The hidden activation is rounded as linear_gated rounds it (each
    # product rounded, then multiplied in the dtype); the down projection's fp32 sum runs
    # in the ring's order: against linear_gated's and the matmul's kernels, and the CPU.
    a = (rand((m, d), dtype, 61) + (3 if kind else 0)).to("spyre")
    w1, w3 = rand((h, d), dtype, 62).to("spyre"), rand((h, d), dtype, 63).to("spyre")
    w2, residual = rand((d, h), dtype, 64).to("spyre"), rand((m, d), dtype, 65).to("spyre")
    norm = ()
    if kind:
        w, _ = _norm_params(kind, d, dtype, 66)
        norm = (kind, w, None, float(torch.tensor(1e-6, dtype=dtype)))
    norm_args = norm or ("", None, None, 0.0)

    def fused():
        return torch.ops.spyre.mlp(a, w1, None, "silu", w2, None, residual, *norm_args, None, None, None, w3)

    def two_kernels():
        hid = torch.ops.spyre.linear_gated(a, w1, w3, "silu", *norm_args)
        return torch.ops.spyre.matmul_epilogue(hid, w2.t(), None, "", residual, "add")

    torch.spyre.reset_fallback_counts()
    names, _ = kernels(fused)
    assert names == ["spyre::mlp[" + (kind + "," if kind else "") + "gated_silu,residual]"]
    assert kernels(two_kernels)[0] == ["spyre::linear_gated[" + (kind + "," if kind else "") + "silu]",
                                       "spyre::matmul[residual]"]
    x = a.cpu().float()
    if kind:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm[3]) * norm[1].cpu().float()
    gate, up = x @ w1.cpu().float().t(), x @ w3.cpu().float().t()
    hid = (F.silu(gate).to(dtype) * up.to(dtype)).float()
    want = (hid @ w2.cpu().float().t()).to(dtype).float() + residual.cpu().float()
    scale = want.abs().max().item()
    close = dict(atol={torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype] * scale, rtol=0)
    assert_close(fused().cpu().float(), want, **close)
    assert_close(two_kernels().cpu().float(), want, **close)
    assert_close(fused().cpu().float(), two_kernels().cpu().float(), **close)
    assert torch.spyre.fallback_counts() == {}


class _GatedMlp(torch.nn.Module):
    """x + w2(silu(w1 x) * w3 x); with `keep`, the hidden activation is an output too."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep
        self.w1, self.w3 = torch.nn.Linear(64, 160, bias=False), torch.nn.Linear(64, 160, bias=False)
        self.w2 = torch.nn.Linear(160, 64, bias=False)

    def forward(self, x):
        hid = F.silu(self.w1(x)) * self.w3(x)
        y = x + self.w2(hid)
        return (y, hid) if self.keep else y


@pytest.mark.parametrize("keep", [False, True])
def test_a_gated_pair_joins_the_mlp_kernel_only_when_nothing_else_reads_its_result(keep):
    torch._dynamo.reset()
    torch.manual_seed(8)
    model = _GatedMlp(keep)
    x = rand((2, 12, 64), torch.float32, 41)
    want = model(x)
    model = model.to("spyre")
    with torch.no_grad():
        compiled = torch.compile(model, backend="spyre")
        torch.spyre.reset_fallback_counts()
        got = compiled(x.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        names, _ = kernels(compiled, x.to("spyre"))
    for g, w in zip(got if keep else [got], want if keep else [want]):
        assert_close(g.cpu(), w, atol=1e-4, rtol=1e-4)
    if keep:  # the hidden activation is written: the gated pair keeps its kernel
        assert names == ["spyre::linear_gated[silu]", "spyre::matmul[residual]"]
    else:
        assert names == ["spyre::mlp[gated_silu,residual]"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,d,h,dp", [(37, 64, 200, 96), (300, 200, 1000, 24), (1, 128, 512, 64)], ids=str)
def test_a_projection_before_an_mlp_in_its_kernel_equals_the_projection_then_the_mlp(dtype, m, d, h, dp):
    # y = mlp(x1) + x1 for x1 = p @ wp.t() + bp + x, x1 kept on chip (each core its rows)
    # on the CI chip's 4 cores: p's columns split 24 a core (dp 24: one core has them
    # all, the others add zeros), rows fewer than cores (m 1: a size the estimate keeps
    # fused in every dtype; at d 96, h 256 the 16-bit kernel is estimated slower than
    # two and refused). Against the projection's kernel then the MLP's, to the order of
    # the fp32 sums (as above), and against the CPU.
    x, p = rand((m, d), dtype, 91).to("spyre"), rand((m, dp), dtype, 92).to("spyre")
    wp, bp = rand((d, dp), dtype, 93).to("spyre"), rand((d,), dtype, 94).to("spyre")
    w1, b1 = rand((h, d), dtype, 95).to("spyre"), rand((h,), dtype, 96).to("spyre")
    w2, b2 = rand((d, h), dtype, 97).to("spyre"), rand((d,), dtype, 98).to("spyre")
    w, b = _norm_params("layer_norm", d, dtype, 99)
    norm = ("layer_norm", w, b, 1e-5)
    torch.spyre.reset_fallback_counts()
    fused = lambda: torch.ops.spyre.mlp(x, w1, b1, "gelu_tanh", w2, b2, None, *norm, p, wp, bp)  # noqa: E731
    names, _ = kernels(fused)
    assert names == ["spyre::mlp[linear,bias,residual,layer_norm,gelu_tanh,residual]"]

    def two_kernels():
        x1 = torch.ops.spyre.matmul_epilogue(p, wp.t(), bp, "", x, "add")
        return torch.ops.spyre.mlp(x1, w1, b1, "gelu_tanh", w2, b2, x1, *norm)

    # (What x1 saves in DRAM traffic shows at real sizes: tests/compiler/mlp_test.cpp. At
    # these sizes the cores' slices of the weights can straddle 128-byte sticks, which DMA
    # moves whole.)
    assert kernels(two_kernels)[0] == ["spyre::matmul[bias,residual]", "spyre::mlp[layer_norm,gelu_tanh,residual]"]
    want = two_kernels().cpu().float()
    scale = want.abs().max().item()
    close = dict(atol={torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype] * scale, rtol=0)
    assert_close(fused().cpu().float(), want, **close)
    x1 = (p.cpu().float() @ wp.cpu().float().t() + bp.cpu().float()).to(dtype).float() + x.cpu().float()
    x1 = x1.to(dtype).float()
    hid = F.gelu(F.layer_norm(x1, (d,), w.cpu().float(), b.cpu().float(), 1e-5) @ w1.cpu().float().t()
                 + b1.cpu().float(), approximate="tanh").to(dtype).float()
    cpu = (hid @ w2.cpu().float().t() + b2.cpu().float()).to(dtype).float() + x1
    assert_close(fused().cpu().float(), cpu, **close)
    assert torch.spyre.fallback_counts() == {}


class _ProjectedMlp(torch.nn.Module):
    """x1 = x + proj(a), then x1 + mlp(ln(x1)): a transformer block's second half; with
    `keep`, x1 is an output too."""

    def __init__(self, keep):
        super().__init__()
        self.keep, self.proj, self.ln = keep, torch.nn.Linear(96, 64), torch.nn.LayerNorm(64)
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x, a):
        x1 = x + self.proj(a)
        y = x1 + self.down(F.gelu(self.up(self.ln(x1))))
        return (y, x1) if self.keep else y


@pytest.mark.parametrize("keep", [False, True])
def test_a_projection_joins_the_mlp_kernel_only_when_nothing_else_reads_its_result(keep):
    torch._dynamo.reset()
    torch.manual_seed(6)
    model = _ProjectedMlp(keep)
    x, a = rand((2, 20, 64), torch.float32, 31), rand((2, 20, 96), torch.float32, 32)
    want = model(x, a)
    model = model.to("spyre")
    with torch.no_grad():
        compiled = torch.compile(model, backend="spyre")
        torch.spyre.reset_fallback_counts()
        got = compiled(x.to("spyre"), a.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        names, _ = kernels(compiled, x.to("spyre"), a.to("spyre"))
    for g, w in zip(got if keep else [got], want if keep else [want]):
        assert_close(g.cpu(), w, atol=1e-4, rtol=1e-4)
    if keep:  # x1 is written: the projection keeps its kernel
        assert names == ["spyre::matmul[bias,residual]", "spyre::mlp[layer_norm,gelu,residual]"]
    else:
        assert names == ["spyre::mlp[linear,bias,residual,layer_norm,gelu,residual]"]


def test_an_mlp_checks_its_operands():
    a = torch.ones(4, 8, device="spyre")
    w1, w2 = torch.ones(16, 8, device="spyre"), torch.ones(8, 16, device="spyre")
    with pytest.raises(RuntimeError, match=r"w2 \(the second linear's weight\) must be a \[8, 16\] Float matrix"):
        torch.ops.spyre.mlp(a, w1, None, "relu", w1, None)
    with pytest.raises(RuntimeError, match=r"b1 must be 16 Float values on spyre:0, got shape \[8\]"):
        torch.ops.spyre.mlp(a, w1, torch.ones(8, device="spyre"), "relu", w2, None)
    with pytest.raises(RuntimeError, match="unknown activation 'swish'"):
        torch.ops.spyre.mlp(a, w1, None, "swish", w2, None)
    with pytest.raises(RuntimeError, match=r"the residual must be a \[4, 8\] Float matrix"):
        torch.ops.spyre.mlp(a, w1, None, "relu", w2, None, torch.ones(4, 16, device="spyre"))
    with pytest.raises(RuntimeError, match="with a projection the residual is its result"):
        torch.ops.spyre.mlp(a, w1, None, "relu", w2, None, a, "", None, None, 0., a, torch.ones(8, 8, device="spyre"))
    with pytest.raises(RuntimeError, match=r"proj_weight must be a \[8, 8\] Float matrix"):
        torch.ops.spyre.mlp(a, w1, None, "relu", w2, None, None, "", None, None, 0., a, w2)
    with pytest.raises(RuntimeError, match="proj_weight or proj_bias without proj_input"):
        torch.ops.spyre.mlp(a, w1, None, "relu", w2, None, None, "", None, None, 0., None, w2)
    with pytest.raises(RuntimeError, match=r"up_weight \(w3\) must be a \[16, 8\] Float matrix"):
        torch.ops.spyre.mlp(a, w1, None, "silu", w2, None, None, "", None, None, 0., None, None, None, w2)
    with pytest.raises(RuntimeError, match="a gated first half .* takes no b1"):
        torch.ops.spyre.mlp(a, w1, torch.ones(16, device="spyre"), "silu", w2, None, None, "", None, None, 0.,
                            None, None, None, w1)
    with pytest.raises(RuntimeError, match="linear_gated's activations .* got 'hardswish'"):
        torch.ops.spyre.mlp(a, w1, None, "hardswish", w2, None, None, "", None, None, 0., None, None, None, w1)
    # The device keeps working.
    assert_close(torch.ops.spyre.mlp(a, w1, None, "relu", w2, None).cpu(), torch.full((4, 8), 128.0))


def test_an_mlp_that_would_reread_its_weights_runs_as_its_two_matmul_kernels():
    # On the CI chip, 4096 hidden units give each core 1024: blocks of 256 of the 512 rows
    # fit the scratchpad, and would read the 8 MiB of weights twice, as much more as the
    # 8 MiB of hidden activation the fusion saves (tests/compiler/mlp_test.cpp): the op
    # runs the two matmul kernels instead, with their values.
    a = rand((512, 512), torch.float16, 81).to("spyre")
    w1, w2 = rand((4096, 512), torch.float16, 82).to("spyre"), rand((512, 4096), torch.float16, 83).to("spyre")
    torch.spyre.reset_fallback_counts()
    names, _ = kernels(lambda: torch.ops.spyre.mlp(a, w1, None, "relu", w2, None))
    assert names == ["spyre::matmul[relu]", "spyre::matmul[]"]
    assert_close(torch.ops.spyre.mlp(a, w1, None, "relu", w2, None).cpu(),
                 _mlp_unfused(a, w1, None, "relu", w2, None, None).cpu(), atol=0, rtol=0)
    assert torch.spyre.fallback_counts() == {}


class _SharedNorm(torch.nn.Module):
    """A LayerNorm read by two linears with biases (which stay two kernels)."""

    def __init__(self):
        super().__init__()
        self.ln, self.a, self.b = torch.nn.LayerNorm(64), torch.nn.Linear(64, 32), torch.nn.Linear(64, 48)

    def forward(self, x):
        h = self.ln(x)
        return self.a(h).sum(-1) + self.b(h).sum(-1)


def fp32_compiled_kernels(model_class, x):
    """The kernels of model_class() (seeded) compiled for spyre on x, checked against the CPU in fp32."""
    torch._dynamo.reset()
    torch.manual_seed(5)
    model = model_class()
    want = model(x)
    model = model.to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(model, x)
        assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
        names, _ = kernels(compiled, x.to("spyre"))
    return names


def test_a_norm_read_by_two_matmuls_keeps_its_kernel():
    names = fp32_compiled_kernels(_SharedNorm, rand((4, 64), torch.float32, 20))
    assert "aten::native_layer_norm" in names and not any("layer_norm," in n for n in names)


class _ResidualBlock(torch.nn.Module):
    """Two residual connections as transformer blocks make them: x + Linear(x) (addmm),
    then h + Linear(GELU(Linear(h))) without a bias (mm, after an activation epilogue)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(256, 256)
        self.up = torch.nn.Linear(256, 640)
        self.down = torch.nn.Linear(640, 256, bias=False)

    def forward(self, x):
        h = x + self.proj(x)
        return h + self.down(F.gelu(self.up(h)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_residual_adds_after_linear_layers_run_in_the_matmul_epilogue(dtype):
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = _ResidualBlock()
    x = rand((2, 32, 256), dtype, 8)
    want = model(x.float()).to(dtype)
    model = model.to(dtype).to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(model, x)
        assert_close(got.cpu(), want, **{torch.float32: dict(atol=1e-4, rtol=1e-4),
                                         torch.float16: dict(atol=8e-3, rtol=8e-3),
                                         torch.bfloat16: dict(atol=6e-2, rtol=6e-2)}[dtype])
        names, fused_bytes = kernels(compiled, x.to("spyre"))
        eager, eager_bytes = kernels(model, x.to("spyre"))
    # (All of it is one feed-forward kernel: the first residual's linear is its phase 0,
    # h never leaves the chip.)
    assert names == ["spyre::mlp[linear,bias,residual,gelu,residual]"]
    assert eager.count("aten::add") == 2 and len(eager) == 6  # (and gelu's own kernel)
    # Eager moves 10 passes of 2 x 32 x 256 values (proj reads x and writes its product,
    # the add reads both and writes h, up reads h, down writes its product, the second add
    # reads it and h and writes the sum) and 4 of the 2 x 32 x 640 hidden values (up's
    # write, gelu's read and write, down's read). The kernel reads x twice (as the
    # projection's input and its residual) and writes the sum: 7 passes and the hidden
    # ones fewer. Each of its 4 cores (the CI chip) reads all of the projection's bias
    # (256 values, 3 more times than eager). The hidden units go in whole 128-byte sticks
    # (at 64 rows the weights set the time): in 16-bit dtypes 192 to each of the first
    # three cores and 64 to the last rather than 160 each, whose 320-byte pieces of W2's
    # rows and of b1 would straddle sticks, which DMA moves whole; nothing is read twice.
    pass_bytes = 2 * 32 * 256 * x.element_size()
    hidden_bytes = 2 * 32 * 640 * x.element_size()
    bias_copies = 3 * 256 * x.element_size()
    assert eager_bytes - fused_bytes == 7 * pass_bytes + 4 * hidden_bytes - bias_copies


def test_residual_epilogues_compile_with_dynamic_lengths():
    # dynamic=True: the residual's rows are a symbolic size (the view to 2-D takes -1).
    torch._dynamo.reset()
    torch.manual_seed(4)
    model = _ResidualBlock().to("spyre")
    compiled = torch.compile(model, backend="spyre", dynamic=True)
    with torch.no_grad():
        for length in (5, 9, 17):
            x = rand((2, length, 256), torch.float32, length).to("spyre")
            # fp32: the epilogues' single roundings are eager's; the feed-forward kernel sums
            # the second product in its own order (each core's hidden slice, then the ring's).
            assert_close(compiled(x).cpu(), model(x).cpu(), atol=1e-5, rtol=1e-5)
            assert kernels(compiled, x)[0] == ["spyre::mlp[linear,bias,residual,gelu,residual]"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,n,k", [(37, 70, 50), (1152, 700, 2200), (1030, 260, 640)], ids=str)
def test_a_residual_epilogue_combines_with_the_rounded_product_as_a_separate_op_does(dtype, m, n, k):
    # Shapes with edge tiles, several tiles per core (two stacked, a K step apart) and a
    # core's last tile in row pieces on the CI chip; a bias and an activation before it.
    a, b = rand((m, k), dtype, 11).to("spyre"), rand((k, n), dtype, 12).to("spyre")
    bias, residual = rand((n,), dtype, 13).to("spyre"), rand((m, n), dtype, 14).to("spyre")
    for args in ((None, ""), (bias, "silu")):
        got = torch.ops.spyre.matmul_epilogue(a, b, *args, residual)
        assert torch.equal(got.cpu(), (torch.ops.spyre.matmul_epilogue(a, b, *args) + residual).cpu())
        got = torch.ops.spyre.matmul_epilogue(a, b, *args, residual, "mul")
        assert torch.equal(got.cpu(), (torch.ops.spyre.matmul_epilogue(a, b, *args) * residual).cpu())


def test_a_residual_epilogue_checks_its_operand():
    a = torch.ones(4, 8, device="spyre")
    with pytest.raises(RuntimeError, match="unknown residual_op 'sub' \\(expected add or mul\\)"):
        torch.ops.spyre.matmul_epilogue(a, torch.ones(8, 3, device="spyre"), None, "", None, "sub")
    with pytest.raises(RuntimeError, match=r"the residual must be a 4x3 Float matrix on spyre:0, got shape \[3, 4\]"):
        torch.ops.spyre.matmul_epilogue(a, torch.ones(8, 3, device="spyre"), None, "", torch.ones(3, 4, device="spyre"))
    # A strided residual (a column slice) is read in place; the result as eager's.
    wide = torch.arange(40.0).reshape(4, 10).to("spyre")
    b = torch.ones(8, 3, device="spyre")
    got = torch.ops.spyre.matmul_epilogue(a, b, None, "relu", wide[:, 2:5])
    assert torch.equal(got.cpu(), torch.relu(a.cpu() @ b.cpu()) + wide.cpu()[:, 2:5])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,widths,k", [(37, (70, 20, 20), 50), (1152, (300, 100, 300), 2200), (64, (8, 256), 96)],
                         ids=str)
def test_linears_of_one_input_in_one_kernel_are_the_separate_products(dtype, m, widths, k):
    # On the CI chip: pieces narrower than a tile, tiles that cross a piece boundary
    # (64-wide tiles over 300 | 100 | 300), a piece whose rows are a slice of a wider
    # weight; each piece of the result is the separate mm's product up to the order of
    # its fp32 sums: the simulator's follow the host BLAS's order, which depends on the
    # tile's shape and on the BLAS kernel the host's CPU gets (the last bit or two with
    # AVX-512's; up to 5e-5 of a 2200-term sum with an AMD EPYC's AVX2 kernel).
    a = rand((m, k), dtype, 31).to("spyre")
    weights = [rand((w, k + 5), dtype, 32 + i).to("spyre")[:, 2:k + 2] if i == 1 else rand((w, k), dtype, 32 + i).to("spyre")
               for i, w in enumerate(widths)]
    torch.spyre.reset_fallback_counts()
    got = torch.ops.spyre.linear_concat(a, weights)
    assert torch.spyre.fallback_counts() == {}
    assert got.shape == (m, sum(widths))
    at = 0
    piece_tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else tol(dtype)
    for w in weights:
        assert_close(got[:, at:at + w.shape[0]].cpu(), (a @ w.t()).cpu(), **piece_tol)
        at += w.shape[0]
    assert_close(got.cpu().float(), a.cpu().float() @ torch.cat([w.cpu().float() for w in weights]).t(),
                 **{torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=3e-2, rtol=3e-3),
                    torch.bfloat16: dict(atol=2e-1, rtol=2e-2)}[dtype])


def test_linear_concat_checks_its_operands():
    a = torch.ones(4, 8, device="spyre")
    with pytest.raises(RuntimeError, match=r"weight 1 must be an \[n, 8\] Float matrix on spyre:0, got shape \[3, 7\]"):
        torch.ops.spyre.linear_concat(a, [torch.ones(3, 8, device="spyre"), torch.ones(3, 7, device="spyre")])
    with pytest.raises(RuntimeError, match="needs at least one weight"):
        torch.ops.spyre.linear_concat(a, [])
    with pytest.raises(RuntimeError, match="expected a 2-D input, got 3-D"):
        torch.ops.spyre.linear_concat(a[None], [torch.ones(3, 8, device="spyre")])
    # A weight with no rows adds no columns; the device keeps working.
    got = torch.ops.spyre.linear_concat(a, [torch.ones(0, 8, device="spyre"), torch.ones(2, 8, device="spyre")])
    assert torch.equal(got.cpu(), torch.full((4, 2), 8.0))


class _Projections(torch.nn.Module):  # attention's Q, K and V (grouped: K and V narrower)
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(256, n, bias=False) for n in (256, 64, 64))

    def forward(self, x):
        return self.q(x) + 1, self.k(x) * 2, self.v(x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_projections_of_one_input_are_one_kernel_that_reads_it_once(dtype):
    torch._dynamo.reset()
    torch.manual_seed(5)
    model = _Projections().to(dtype).to("spyre")
    x = rand((2, 40, 256), dtype, 35).to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(model, x)
        want = model(x)
        for g, w in zip(got, want):
            assert_close(g.cpu(), w.cpu(), **tol(dtype))  # the same products and the same ops after them
        fused = spyre_sim.run(compiled, x)["kernels"]
        eager = [k for k in spyre_sim.run(model, x)["kernels"] if k["name"] == "aten::mm"]
    assert len(eager) == 3 and not any(k["name"] == "aten::mm" for k in fused)
    (concat,) = [k for k in fused if k["name"] == "spyre::linear_concat"]
    # x (2 x 40 x 256 values) is read once instead of three times, with all the weights.
    x_bytes, w_bytes = x.numel() * x.element_size(), (256 + 64 + 64) * 256 * x.element_size()
    assert concat["dram_read_bytes"] == x_bytes + w_bytes
    assert sum(k["dram_read_bytes"] for k in eager) == 3 * x_bytes + w_bytes


@pytest.mark.slow
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("m,n,k", [(37, 70, 50), (1152, 700, 2200), (64, 8, 96)], ids=str)
def test_a_gated_pair_in_one_kernel_equals_its_two_matmul_kernels(dtype, m, n, k):
    # Edge tiles, several tiles per core and a core's last tile in row pieces on the CI
    # chip, an up weight that is a slice of a wider one: the values of the matmul with
    # the activation times the matmul with the gate's multiply (to the last bit or two,
    # as above).
    a = rand((m, k), dtype, 41).to("spyre")
    w1 = rand((n, k), dtype, 42).to("spyre")
    w3 = rand((n, k + 3), dtype, 43).to("spyre")[:, 1:k + 1]
    torch.spyre.reset_fallback_counts()
    for act in ("silu", "gelu_tanh", ""):
        got = torch.ops.spyre.linear_gated(a, w1, w3, act)
        gate = torch.ops.spyre.matmul_epilogue(a, w1.t(), None, act)
        assert_close(got.cpu(), torch.ops.spyre.matmul_epilogue(a, w3.t(), None, "", gate, "mul").cpu(), **tol(dtype))
    assert torch.spyre.fallback_counts() == {}
    ref = F.silu(a.cpu().float() @ w1.cpu().float().t()) * (a.cpu().float() @ w3.cpu().float().t())
    assert_close(torch.ops.spyre.linear_gated(a, w1, w3, "silu").cpu().float(), ref,
                 **{torch.float32: dict(atol=2e-2, rtol=1e-4), torch.float16: dict(atol=5e-2, rtol=1e-2),
                    torch.bfloat16: dict(atol=4e-1, rtol=4e-2)}[dtype])  # (K = 2200: products near 2000)


def test_linear_gated_checks_its_operands():
    a = torch.ones(4, 8, device="spyre")
    w = torch.ones(3, 8, device="spyre")
    with pytest.raises(RuntimeError, match="unknown activation 'swish'"):
        torch.ops.spyre.linear_gated(a, w, w, "swish")
    with pytest.raises(RuntimeError, match=r"the up weight must be an \[n, 8\] Float matrix on spyre:0 \(n the gate's "
                                           r"rows\), got shape \[2, 8\]"):
        torch.ops.spyre.linear_gated(a, w, torch.ones(2, 8, device="spyre"), "silu")
    assert torch.equal(torch.ops.spyre.linear_gated(a, w, w * 2, "").cpu(), torch.full((4, 3), 128.0))


def test_a_gate_linear_gated_does_not_take_keeps_its_two_kernels():
    # hardswish is an epilogue activation but not a gate's (backend/aten/op_table.h):
    # the pass keeps the two matmul kernels instead of a linear_gated that would refuse
    # it. Both lists come from torch.ops.spyre.epilogue_activations.
    rows = [r.split(" ") for r in torch.ops.spyre.epilogue_activations()]
    gates = {name for name, _, gate in rows if gate == "1"}
    assert "hardswish" in {name for name, _, _ in rows} and "hardswish" not in gates and "silu" in gates
    with pytest.raises(RuntimeError, match="unknown activation 'hardswish'.*expected relu, gelu, gelu_tanh, silu"):
        torch.ops.spyre.linear_gated(torch.ones(4, 8, device="spyre"), torch.ones(3, 8, device="spyre"),
                                     torch.ones(3, 8, device="spyre"), "hardswish")

    class HardswishGate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3 = torch.nn.Linear(32, 48, bias=False), torch.nn.Linear(32, 48, bias=False)

        def forward(self, x):
            return F.hardswish(self.w1(x)) * self.w3(x)

    names = fp32_compiled_kernels(HardswishGate, rand((9, 32), torch.float32, 51))
    assert names == ["spyre::matmul[hardswish]", "spyre::matmul[gate]"]


class _RotatedProjections(torch.nn.Module):
    """Q, K and V of one input, Q and K with rotary embeddings (Llama's attention
    inputs, 4 query and 2 key/value heads of 32); `rotate` names the projections rotated."""

    def __init__(self, rotate=("q", "k")):
        super().__init__()
        self.rotate = rotate
        self.q, self.k, self.v = (torch.nn.Linear(128, n, bias=False) for n in (128, 64, 64))
        angles = torch.outer(torch.arange(24.0), 1.0 / 10000 ** (torch.arange(0, 16.0) / 16))
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos())
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin())

    def forward(self, x):
        b, t, _ = x.shape
        out = []
        for name in ("q", "k", "v"):
            z = getattr(self, name)(x).view(b, t, -1, 32).transpose(1, 2)
            out.append(_rotary(z, self.cos[:t], self.sin[:t]) if name in self.rotate else z)
        return out


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rotary_embeddings_of_q_and_k_are_one_kernel_over_their_adjacent_heads(dtype):
    torch._dynamo.reset()
    torch.manual_seed(6)
    x = rand((2, 24, 128), dtype, 36).to("spyre")
    for rotate, rotary_kernels in ((("q", "k"), 1), (("q", "v"), 2)):  # q and v are not adjacent
        model = _RotatedProjections(rotate).to(dtype).to("spyre")
        with torch.no_grad():
            compiled, got = compiled_run(model, x)
            for g, w in zip(got, model(x)):
                assert g.shape == w.shape
                assert_close(g.cpu(), w.cpu(), **tol(dtype))
            names, _ = kernels(compiled, x)
        assert names.count("spyre::linear_concat") == 1
        assert sum("rotate_half" in n for n in names) == rotary_kernels
        assert len(names) == 1 + rotary_kernels


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


def _rotary(q, cos, sin):  # as Llama applies rotary embeddings
    return q * cos + _rotate_half(q) * sin


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rotary_embeddings_are_one_kernel_reading_each_half_in_place(dtype):
    torch._dynamo.reset()
    # q as attention takes it: a [batch, tokens, heads, dim] projection seen as
    # [batch, heads, tokens, dim] (not contiguous); cos and sin [tokens, dim] broadcast.
    q = rand((2, 40, 3, 64), dtype, 21).transpose(1, 2)
    angles = torch.outer(torch.arange(40.0), 1.0 / 10000 ** (torch.arange(0, 32.0) / 32))
    angles = torch.cat([angles, angles], -1)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    compiled = torch.compile(_rotary, backend="spyre")
    args = [t.to("spyre") for t in (q, cos, sin)]
    torch.spyre.reset_fallback_counts()
    got = compiled(*args)
    assert torch.spyre.fallback_counts() == {}
    if dtype == torch.float32:
        # Each op rounds to fp32 as eager does: the CPU's values exactly.
        assert torch.equal(got.cpu(), _rotary(q, cos, sin))
    else:
        assert_close(got.cpu(), _rotary(q.float(), cos.float(), sin.float()).to(dtype), **tol(dtype))
    names, _ = kernels(compiled, *args)
    assert names == ["spyre::fused[mul_rotate_half_mul_add]"]
    assert len(kernels(_rotary, *args)[0]) == 6  # eager: mul, neg, two copies (the cat), mul, add

    # Alone, on a slice (partial rotary, GPT-NeoX style): one kernel, exact (a negation).
    def partial(x):
        return _rotate_half(x[..., :32])

    x = rand((5, 7, 48), dtype, 22)
    got = torch.compile(partial, backend="spyre")(x.to("spyre"))
    assert torch.equal(got.cpu(), partial(x))
    assert kernels(torch.compile(partial, backend="spyre"), x.to("spyre"))[0] == ["spyre::fused[rotate_half]"]


def test_a_concatenation_that_is_not_rotate_half_stays_a_concatenation():
    torch._dynamo.reset()

    def swapped(x):  # no negation
        return torch.cat([x[..., 4:], x[..., :4]], -1) * 2

    def uneven(x):  # halves of different sizes
        return torch.cat([-x[..., 3:], x[..., :3]], -1) * 2

    x = rand((6, 8), torch.float32, 23)
    for fn in (swapped, uneven):
        compiled = torch.compile(fn, backend="spyre")
        assert torch.equal(compiled(x.to("spyre")).cpu(), fn(x))
        assert not any("rotate_half" in n for n in kernels(compiled, x.to("spyre"))[0])


def test_a_split_fused_kernel_checks_its_halves():
    x = torch.ones(4, 6, device="spyre")
    program = [0, 0, 0, 0, 0, -1, 0, -1, 0]  # one unary step (copy) of input 0
    assert torch.equal(torch.ops.spyre.fused_pointwise("t", program, [], [x], torch.float32, 3, [0]).cpu(),
                       torch.ones(4, 6))
    with pytest.raises(RuntimeError, match=r"halves has 2 entries, expected one per tensor input \(1\)"):
        torch.ops.spyre.fused_pointwise("t", program, [], [x], torch.float32, 3, [0, 1])
    with pytest.raises(RuntimeError, match="halves entry 5 is not -1"):
        torch.ops.spyre.fused_pointwise("t", program, [], [x], torch.float32, 3, [5])
    with pytest.raises(RuntimeError, match=r"split 2 needs a result whose last dim is 4, the inputs broadcast to \[4, 6\]"):
        torch.ops.spyre.fused_pointwise("t", program, [], [x], torch.float32, 2, [-1])
    with pytest.raises(RuntimeError, match="halves given without a split"):
        torch.ops.spyre.fused_pointwise("t", program, [], [x], torch.float32, 0, [-1])


