"""torch.compile(backend="spyre"): aten graphs whose pointwise chains run as one fused
device kernel each (python/spyre_sim/dynamo/, backend/aten/fused_ops.cpp), checked
against the CPU and against the same code run eagerly on the device."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import spyre_sim
from spyre_sim.models import SwiGLU, WrittenRMSNorm, repeat_kv
from test_pointwise import FLOATS, rand

aten = torch.ops.aten


def tol(dtype):
    # Fused chains keep inner results in fp32 and round once; eager rounds every op.
    return {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
            torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}[dtype]


def kernels(fn, *args):
    """Names of the kernels one call launches, and the DRAM bytes they move."""
    report = spyre_sim.run(fn, *args)
    return [k["name"] for k in report["kernels"]], report["metrics"]["dram_read_bytes"] + \
        report["metrics"]["dram_write_bytes"]


def compiled_run(model, x):
    """model compiled for spyre and its result on x (moved to the device), with no CPU fallback."""
    compiled = torch.compile(model, backend="spyre")
    torch.spyre.reset_fallback_counts()
    got = compiled(x.to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    return compiled, got


def chain(x, y):
    return torch.sigmoid(F.gelu(x * 2 + 1) * y) - 0.5


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_pointwise_chain_is_one_kernel(dtype):
    torch._dynamo.reset()
    x, y = rand((33, 1000), dtype, 1), rand((1000,), dtype, 2)  # y broadcast along rows
    compiled = torch.compile(chain, backend="spyre")
    torch.spyre.reset_fallback_counts()
    got = compiled(x.to("spyre"), y.to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    want = chain(x.float(), y.float()).to(dtype)  # fp32 inside, one rounding
    assert got.dtype == dtype and got.shape == want.shape
    assert_close(got.cpu(), want, **tol(dtype))

    fused, fused_bytes = kernels(compiled, x.to("spyre"), y.to("spyre"))
    eager, eager_bytes = kernels(chain, x.to("spyre"), y.to("spyre"))
    assert fused == ["spyre::fused[mul_add_gelu_mul_sigmoid_sub]"]
    assert eager == ["aten::mul", "aten::add", "aten::gelu", "aten::mul", "aten::sigmoid", "aten::sub"]
    # One pass: x read once and the result written once, the broadcast row y once per
    # tile a core loads (a few); eager makes 6 passes.
    x_bytes = x.numel() * x.element_size()
    assert 2 * x_bytes <= fused_bytes <= 2 * x_bytes + 8 * 4096
    assert eager_bytes > 5 * fused_bytes


def test_a_value_used_twice_is_stored_and_a_lone_op_keeps_its_eager_kernel():
    torch._dynamo.reset()

    def f(x):
        a = x * 3                                 # two users: the result of its own kernel
        return a.exp() + a, torch.clamp_min(x, 0.1)  # alone: its eager kernel, not a fused one

    x = rand((7, 129), torch.float32, 3)
    compiled = torch.compile(f, backend="spyre")
    torch.spyre.reset_fallback_counts()
    got = compiled(x.to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    for g, w in zip(got, f(x)):
        assert_close(g.cpu(), w, **tol(torch.float32))
    names, _ = kernels(compiled, x.to("spyre"))
    assert sorted(names) == ["aten::clamp_min", "aten::mul", "spyre::fused[exp_add]"]


def test_a_comparison_with_a_scalar_rounds_it_to_the_tensor_dtype_as_eager_does():
    torch._dynamo.reset()
    x = torch.tensor([0.1, 0.2, -1.0, 0.0999], dtype=torch.float16)  # fp16(0.1) is 0.09998

    def f(t):
        return torch.where(t >= 0.1, t * 2, t - 1)

    got = torch.compile(f, backend="spyre")(x.to("spyre"))
    assert torch.equal(got.cpu(), f(x.to("spyre")).cpu())
    assert torch.equal(got.cpu(), f(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_an_rmsnorm_swiglu_block_matches_eager_with_fewer_kernels(dtype):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = SwiGLU(64, 160)
    with torch.no_grad():
        model.norm.copy_(torch.rand(64) + 0.5)  # a trained-looking norm weight, not ones
    model = model.to(dtype)
    x = rand((2, 9, 64), dtype, 4)
    want = model.float()(x.float()).to(dtype)
    model = model.to(dtype).to("spyre")
    compiled = torch.compile(model, backend="spyre")
    torch.spyre.reset_fallback_counts()
    with torch.no_grad():
        got = compiled(x.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        assert_close(got.cpu(), want, atol=5e-3 if dtype == torch.float16 else 1e-4, rtol=5e-3)
        fused, _ = kernels(compiled, x.to("spyre"))
        eager, _ = kernels(model, x.to("spyre"))
    # The written-out norm (pow, mean, add, rsqrt, mul, mul) is nn.RMSNorm's one kernel;
    # silu(w1 h) * w3 h is one kernel reading h once (linear_gated), with the norm as its
    # prologue (fuse_norm_prologues); x + w2(...) is the down projection's epilogue; and
    # the two are one feed-forward kernel (fuse_mlps), the hidden activation on chip.
    assert fused == ["spyre::mlp[rms_norm,gated_silu,residual]"]
    assert len(eager) == 12


def hf_rms_norm(d):
    """Hugging Face's LlamaRMSNorm as written there (spyre_sim.models.WrittenRMSNorm), with a
    trained-looking weight rather than ones."""
    norm = WrittenRMSNorm(d)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(d) + 0.5)
    return norm


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_hugging_face_rmsnorm_is_the_one_rms_norm_kernel(dtype):
    torch._dynamo.reset()
    torch.manual_seed(1)
    norm = hf_rms_norm(96).to(dtype)
    x = rand((3, 5, 96), dtype, 5) * 3
    want = F.rms_norm(x.float(), (96,), eps=1e-6).to(dtype) * norm.weight.detach()  # PyTorch's own order
    norm = norm.to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(norm, x)
        fused, fused_bytes = kernels(compiled, x.to("spyre"))
        eager, eager_bytes = kernels(norm, x.to("spyre"))
    assert fused == ["aten::rms_norm"]
    assert len(eager) >= 6  # two casts, pow, mean, add, rsqrt, mul, mul (fp32: no casts)
    assert_close(got.cpu(), want, **tol(dtype))
    x_bytes = x.numel() * x.element_size()
    assert fused_bytes <= 2 * x_bytes + 4 * 96 * 4  # one read of x, one write, the weight
    assert eager_bytes > 3 * fused_bytes


def test_a_written_out_rmsnorm_whose_statistics_are_read_elsewhere_keeps_its_ops():
    torch._dynamo.reset()

    def f(x, w):
        ms = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(ms + 1e-5) * w, ms  # the mean of squares is an output too

    x, w = rand((4, 64), torch.float32, 6), rand((64,), torch.float32, 7)
    compiled = torch.compile(f, backend="spyre")
    got = compiled(x.to("spyre"), w.to("spyre"))
    for g, want in zip(got, f(x, w)):
        assert_close(g.cpu(), want, **tol(torch.float32))
    names, _ = kernels(compiled, x.to("spyre"), w.to("spyre"))
    assert "aten::rms_norm" not in names and "aten::mean" in names


def test_a_written_out_rmsnorm_still_trains():
    # A training forward saves the norm's inner results for its backward, so its ops
    # stay; the gradients are the CPU's.
    torch._dynamo.reset()
    torch.manual_seed(3)
    norm = hf_rms_norm(64)
    x = rand((6, 64), torch.float32, 8)
    norm(x).square().sum().backward()
    want = norm.weight.grad.clone()
    norm.weight.grad = None
    norm = norm.to("spyre")
    compiled = torch.compile(norm, backend="spyre")
    compiled(x.to("spyre")).square().sum().backward()
    assert_close(norm.weight.grad.cpu(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_activations_after_linear_layers_run_in_the_matmul_epilogue(dtype):
    torch._dynamo.reset()
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(64, 160), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(160, 64),
                                torch.nn.SiLU(), torch.nn.Linear(64, 8, bias=False), torch.nn.ReLU())
    x = rand((33, 64), dtype, 7)
    want = model(x.float()).to(dtype)  # fp32 math, one rounding per layer
    model = model.to(dtype).to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(model, x)
        assert_close(got.cpu(), want, **{torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=4e-3, rtol=4e-3),
                                         torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}[dtype])
        names, _ = kernels(compiled, x.to("spyre"))
    assert names == ["spyre::matmul[bias,gelu_tanh]", "spyre::matmul[bias,silu]", "spyre::matmul[relu]"]
    with pytest.raises(RuntimeError, match="unknown activation 'swish'"):
        torch.ops.spyre.matmul_epilogue(x.to("spyre"), x.to("spyre").t(), None, "swish")


# Activations as models write them out (Hugging Face's gelu_new and FastGELU, BLOOM's
# GELU, the exact GELU through erf, SiLU as x * sigmoid(x)), each with the epilogue it is.
WRITTEN_ACTIVATIONS = {
    "gelu_new": (lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),
                 "gelu_tanh"),
    "fast_gelu": (lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))), "gelu_tanh"),
    "bloom_gelu": (lambda x: x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))), "gelu_tanh"),
    "erf_gelu": (lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))), "gelu"),
    "x_sigmoid_x": (lambda x: x * torch.sigmoid(x), "silu"),
    "logistic": (lambda x: 1 / (1 + torch.exp(-x)), "sigmoid"),
}


class _WrittenMlp(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.up, self.down, self.act = torch.nn.Linear(64, 160), torch.nn.Linear(160, 64), act

    def forward(self, x):
        return self.down(self.act(self.up(x)))


@pytest.mark.parametrize("name", WRITTEN_ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_an_activation_written_out_in_ops_runs_in_the_matmul_epilogue(name, dtype):
    torch._dynamo.reset()
    torch.manual_seed(4)
    act, epilogue = WRITTEN_ACTIVATIONS[name]
    model = _WrittenMlp(act)
    x = rand((2, 17, 64), dtype, 9)
    with torch.no_grad():
        want = model(x.float()).to(dtype)
        model = model.to(dtype).to("spyre")
        compiled, got = compiled_run(model, x)
        names, fused_bytes = kernels(compiled, x.to("spyre"))
        eager, eager_bytes = kernels(model, x.to("spyre"))
    assert names == [f"spyre::mlp[{epilogue}]"]  # (with the second linear: one feed-forward kernel)
    assert len(eager) >= 4 and eager_bytes > fused_bytes  # the chain's own kernels and passes
    assert_close(got.cpu(), want, **{torch.float32: dict(atol=1e-4, rtol=1e-4),
                                     torch.float16: dict(atol=4e-3, rtol=4e-3)}[dtype])


def test_a_chain_that_is_not_an_activation_stays_a_fused_kernel():
    torch._dynamo.reset()

    def almost_gelu(x):  # 0.8 for sqrt(2 / pi): close, but another function
        return 0.5 * x * (1.0 + torch.tanh(0.8 * (x + 0.044715 * x * x * x)))

    def shared(x):  # the activation's inner x * 0.5 is read elsewhere too
        half = x * 0.5
        return half * (1.0 + torch.erf(x / math.sqrt(2.0))), half

    torch.manual_seed(5)
    lin = torch.nn.Linear(64, 96)
    x = rand((9, 64), torch.float32, 10)
    for fn in (almost_gelu, shared):
        torch._dynamo.reset()
        with torch.no_grad():
            want = fn(lin(x))
            dev = lin.to("spyre")
            compiled = torch.compile(lambda t: fn(dev(t)), backend="spyre")
            got = compiled(x.to("spyre"))
            names, _ = kernels(compiled, x.to("spyre"))
            lin = lin.cpu()
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert_close(g.cpu(), w, atol=1e-5, rtol=1e-5)
        assert names[0] == "aten::addmm" and any(n.startswith("spyre::fused[") for n in names), names


def gqa_by_repeat(q, k, v):
    groups = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), is_causal=q.shape[2] > 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("q_len", [1, 37])  # a decode step against a cache, and a prefill
def test_repeated_kv_heads_are_not_copied_before_the_attention(dtype, q_len):
    torch._dynamo.reset()
    q, k, v = rand((2, 8, q_len, 32), dtype, 11), rand((2, 2, 37, 32), dtype, 12), rand((2, 2, 37, 32), dtype, 13)
    want = gqa_by_repeat(q.float(), k.float(), v.float()).to(dtype)
    args = [t.to("spyre") for t in (q, k, v)]
    compiled = torch.compile(gqa_by_repeat, backend="spyre")
    torch.spyre.reset_fallback_counts()
    got = compiled(*args)
    assert torch.spyre.fallback_counts() == {}
    assert_close(got.cpu(), want, **tol(dtype))
    names, fused_bytes = kernels(compiled, *args)
    eager, eager_bytes = kernels(gqa_by_repeat, *args)
    assert names == ["aten::_scaled_dot_product_fused_attention_overrideable"]
    assert eager == ["aten::copy_", "aten::copy_", names[0]]  # K and V repeated four times over
    assert_close(gqa_by_repeat(*args).cpu(), want, **tol(dtype))  # (the copies read K and V once each)
    kv_bytes = 2 * k.numel() * k.element_size()
    assert eager_bytes - fused_bytes >= 2 * 4 * kv_bytes  # the copies' writes and the re-reads


def test_repeated_kv_heads_still_train():
    # A training forward keeps the repeated K and V for its backward; gradients are the CPU's.
    torch._dynamo.reset()
    q, k, v = (rand(shape, torch.float32, seed).requires_grad_() for shape, seed in
               (((1, 4, 9, 16), 14), ((1, 2, 9, 16), 15), ((1, 2, 9, 16), 16)))
    gqa_by_repeat(q, k, v).square().sum().backward()
    want = [t.grad.clone() for t in (q, k, v)]
    dq, dk, dv = (t.detach().to("spyre").requires_grad_() for t in (q, k, v))
    torch.compile(gqa_by_repeat, backend="spyre")(dq, dk, dv).square().sum().backward()
    for t, w in zip((dq, dk, dv), want):
        assert_close(t.grad.cpu(), w, atol=1e-4, rtol=1e-4)


def test_torch_compile_without_a_backend_compiles_spyre_graphs_with_the_spyre_backend(monkeypatch):
    # Inductor, the default, has no spyre code generator ("Device spyre not supported").
    torch._dynamo.reset()
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU())
    x = rand((5, 64), torch.float32, 17)
    want = model(x)
    model = model.to("spyre")
    with torch.no_grad():
        compiled, got = compiled_run(model, x)  # (backend="spyre")
        default = torch.compile(model)
        assert_close(default(x.to("spyre")).cpu(), want, **tol(torch.float32))
        names, _ = kernels(default, x.to("spyre"))
    assert names == ["spyre::matmul[bias,gelu]"]  # the spyre backend's epilogue
    # Inductor's modes do not apply: said once.
    monkeypatch.setattr(torch._TorchCompileInductorWrapper, "_spyre_warned", False, raising=False)
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="do not apply to spyre graphs"):
        got = torch.compile(model, mode="max-autotune-no-cudagraphs")(x.to("spyre"))
    assert_close(got.detach().cpu(), want.detach(), **tol(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_a_llama_block_as_hugging_face_writes_it_compiles_to_the_same_kernels(dtype):
    # LlamaRMSNorm (fp32 upcast, elementwise ops) and repeat_kv (copies of K and V)
    # against nn.RMSNorm and enable_gqa: the same kernels once compiled.
    from spyre_sim.models import LlamaBlock  # noqa: PLC0415

    torch._dynamo.reset()
    torch.manual_seed(7)
    written = LlamaBlock(64, 4, 2, 96, 16, written_out=True)
    plain = LlamaBlock(64, 4, 2, 96, 16)
    with torch.no_grad():
        for norm in (written.n1, written.n2):
            norm.weight.copy_(torch.rand(64) + 0.5)
        plain.load_state_dict(written.state_dict())
        x = rand((2, 16, 64), dtype, 18)
        want = written.float()(x.float()).to(dtype)
        written, plain = written.to(dtype).to("spyre"), plain.to(dtype).to("spyre")
        compiled, got = compiled_run(written, x)
        assert_close(got.cpu(), want, **{torch.float32: dict(atol=1e-4, rtol=1e-4),
                                         torch.float16: dict(atol=5e-3, rtol=5e-3)}[dtype])
        names, _ = kernels(compiled, x.to("spyre"))
        eager, _ = kernels(written, x.to("spyre"))
        torch._dynamo.reset()
        plain_names, _ = kernels(torch.compile(plain, backend="spyre"), x.to("spyre"))
    # (The first norm in the QKV kernel's prologue; the output projection, its residual,
    # the second norm, the gated feed-forward and its residual in one kernel.)
    assert names == plain_names == ["spyre::linear_concat[rms_norm]", "spyre::fused[mul_rotate_half_mul_add]",
                                    "aten::_scaled_dot_product_fused_attention_overrideable",
                                    "spyre::mlp[linear,residual,rms_norm,gated_silu,residual]"]
    assert len(eager) > 3 * len(names)


def test_training_through_the_compiled_graphs_gives_eager_gradients():
    torch._dynamo.reset()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 8))
    x, target = rand((16, 32), torch.float32, 5), rand((16, 8), torch.float32, 6)
    reference = [p.detach().clone() for p in model.parameters()]

    def loss_of(m, inputs, t):
        return ((torch.tanh(m(inputs)) - t) ** 2 * 0.5).sum()

    loss_of(model, x, target).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model = model.to("spyre")
    compiled = torch.compile(lambda i, t: loss_of(model, i, t), backend="spyre")
    loss = compiled(x.to("spyre"), target.to("spyre"))
    loss.backward()
    for p, r, w in zip(model.parameters(), reference, want):
        assert_close(p.detach().cpu(), r)
        assert_close(p.grad.cpu(), w, atol=1e-4, rtol=1e-4)


def test_a_malformed_program_is_a_clear_error_and_the_device_keeps_working():
    t = torch.ones(4, device="spyre")
    op = torch.ops.spyre.fused_pointwise
    c = dict(torch.ops.spyre.pointwise_codes())
    none = [c["arg.none"], 0]

    def step(kind, op_name, dtype, *args):
        code = c[f"{kind}.{op_name}"] if op_name else 0
        words = [c[f"kind.{kind}"], code, c[f"dtype.{dtype}"]]
        for a in range(3):
            words += [c[f"arg.{args[a][0]}"], args[a][1]] if a < len(args) else none
        return words

    exp = step("unary", "exp", "fp32", ("input", 0))
    with pytest.raises(RuntimeError, match=r"step 1: binary op 99 does not exist \(0\.\.6\)"):
        op("bad", exp + [c["kind.binary"], 99, 0, 0, 0, 0, 0] + none, [], [t], torch.float32)
    with pytest.raises(RuntimeError, match=r"step 0: argument 0: input 2 does not exist: 1 tensor input"):
        op("bad", step("unary", "exp", "fp32", ("input", 2)), [], [t], torch.float32)
    with pytest.raises(RuntimeError, match=r"step 0: dtype 17 is not a device dtype"):
        op("bad", exp[:2] + [17] + exp[3:], [], [t], torch.float32)
    with pytest.raises(RuntimeError, match=r"step 0: argument 0: step 0 is not an earlier step"):
        op("bad", step("unary", "exp", "fp32", ("step", 0)), [], [t], torch.float32)
    with pytest.raises(RuntimeError, match=r"step 0: argument 1: a unary step takes 1"):
        op("bad", exp[:5] + [0, 0] + none, [], [t], torch.float32)
    with pytest.raises(RuntimeError, match=r"argument 1: constant 0 does not exist: 0 constant"):
        op("bad", step("binary", "add", "fp32", ("input", 0), ("constant", 0)), [], [t], torch.float32)
    with pytest.raises(RuntimeError, match=r"has 10 integers, expected 9 per step"):
        op("bad", exp + [0], [], [t], torch.float32)
    program = step("binary", "add", "fp32", ("input", 0), ("constant", 0)) + step("unary", "neg", "fp32", ("step", 0))
    got = op("ok", program, [2.5], [t], torch.float16)
    assert got.dtype == torch.float16 and got.cpu().tolist() == [-3.5] * 4


def test_the_fusible_set_and_the_device_registrations_come_from_one_table():
    # Every unary, binary and comparison row of the C++ op table (op_table.h) is fused
    # by torch.compile and registered as a device kernel; composite rows need an
    # emitter on the Python side.
    from spyre_sim import dynamo

    rows = [r.split(" ") for r in torch.ops.spyre.fusible_ops()]
    assert {aten.exp.default, aten.relu.default, aten.add.Tensor, aten.eq.Scalar, aten.pow.Tensor_Scalar} <= set(
        dynamo.FUSIBLE_OPS)
    assert len(dynamo.FUSIBLE_OPS) == len(rows)
    for family, name, *_ in rows:
        packet, overload = name.split(".")
        op = getattr(getattr(aten, packet), overload)
        assert op in dynamo.FUSIBLE_OPS, name
        if family != "composite" and overload != "Scalar":
            # Its own device kernel (not the CPU fallback, not a composite).
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1"), name
    # The analytic ones (the activation pass's chains) are a part of the same table.
    analytic = set(torch.ops.spyre.analytic_ops())
    assert analytic <= {name for _, name, *_ in rows}
    assert {"add.Tensor", "mul.Tensor", "tanh.default", "erf.default", "rsub.Scalar", "pow.Tensor_Scalar"} <= analytic
    assert not analytic & {"relu.default", "maximum.default", "clamp.default", "_to_copy.default", "eq.Tensor"}


def test_new_shapes_recompile_with_dynamic_sizes_and_still_fuse():
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 8))
    compiled = torch.compile(model.to("spyre"), backend="spyre")
    with torch.no_grad():
        for batch in (4, 7, 33):  # the second size makes Dynamo trace with a symbolic batch
            x = rand((batch, 64), torch.float32, batch)
            torch.spyre.reset_fallback_counts()
            got = compiled(x.to("spyre"))
            assert torch.spyre.fallback_counts() == {}
            assert_close(got.cpu(), model.cpu()(x), atol=1e-4, rtol=1e-4)
            model.to("spyre")
            names, _ = kernels(compiled, x.to("spyre"))
            assert names == ["spyre::matmul[bias,gelu]", "aten::addmm"]


def test_every_pow_exponent_of_the_eager_kernel_is_fused_too():
    # The compile path fused 2, 0.5, -0.5 and -1 while eager ran 1, 2, 3, 0.5, -0.5, -1
    # and -2 on the device: both now read one C++ list.
    exponents = sorted(torch.ops.spyre.pow_exponents())
    assert exponents == [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0]
    x = rand((7, 33), torch.float32, 3).abs() + 0.5
    for e in exponents:
        torch._dynamo.reset()
        fn = lambda t: torch.pow(t * 1.5, e) + 1  # noqa: E731  (a chain: mul, pow, add)
        torch.spyre.reset_fallback_counts()
        eager = fn(x.to("spyre"))
        assert torch.spyre.fallback_counts() == {}, e
        names, _ = kernels(torch.compile(fn, backend="spyre"), x.to("spyre"))
        assert len(names) == 1 and names[0].startswith("spyre::fused"), (e, names)  # one fused kernel
        # The fused kernel splices the eager kernel's own steps (pow_program): in fp32 the
        # two agree to the bit.
        assert torch.equal(torch.compile(fn, backend="spyre")(x.to("spyre")).cpu(), eager.cpu()), e
        assert_close(eager.cpu(), fn(x), rtol=1e-5, atol=1e-5)


def test_clones_that_change_nothing_are_dropped_and_the_others_kept():
    from torch.fx.experimental.proxy_tensor import make_fx

    from spyre_sim.dynamo import drop_layout_preserving_clones

    def clones(graph):
        return [n for n in graph.nodes if n.target is aten.clone.default]

    def f(x):
        y = x * 2
        a = y.clone() + 1                   # contiguous, read by an op: dropped
        b = y.t().clone(memory_format=torch.contiguous_format).sum(0)  # changes the layout: kept
        return a, b, y.clone().view(-1)     # seen by an output through a view: kept

    x = torch.randn(4, 6)
    gm = drop_layout_preserving_clones(make_fx(f, tracing_mode="fake")(x))
    assert len(clones(gm.graph)) == 2
    for got, want in zip(gm(x), f(x)):
        assert_close(got, want)

    def g(x):
        y = x * 2
        z = y.clone()
        y.add_(1)                           # a mutation: every clone stays
        return z + y

    gm = drop_layout_preserving_clones(make_fx(g, tracing_mode="fake")(x))
    assert len(clones(gm.graph)) == 1
    assert_close(gm(x), g(x))


def test_an_eval_encoder_layer_compiles_without_its_dropout_copies():
    # AOTAutograd writes eval-mode dropout as a clone: each would be a device copy of
    # the activations; dropped, the compiled layer is not slower than eager.
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        want = layer(x)
        dev = layer.to("spyre")
        compiled = torch.compile(dev, backend="spyre")
        assert_close(compiled(x.to("spyre")).cpu(), want, atol=1e-4, rtol=1e-4)
        eager = spyre_sim.run(dev, x.to("spyre"))["metrics"]
        fused = spyre_sim.run(compiled, x.to("spyre"))["metrics"]
    assert fused["dram_read_bytes"] + fused["dram_write_bytes"] < eager["dram_read_bytes"] + eager["dram_write_bytes"]
    assert fused["time_us"] < eager["time_us"]
