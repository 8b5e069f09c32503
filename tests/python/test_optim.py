"""Optimizer steps and training utilities on the device: SGD and Adam(W) in their default
(foreach) and fused (`fused=True`) forms, clip_grad_norm_ (linalg_vector_norm), and the
pointwise ops the foreach fallbacks call (addcmul, addcdiv, lerp), against the CPU's
single-tensor implementations, with no fallback."""

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from test_pointwise import FLOATS, rand


def no_fallback(fn, *args, **kw):
    torch.spyre.reset_fallback_counts()
    out = fn(*args, **kw)
    assert torch.spyre.fallback_counts() == {}
    return out


def train(device, make_optimizer, steps=3, compiled=False):
    """Three steps of an MLP with LayerNorm and GELU: forward (compiled or eager),
    cross_entropy, backward, clip_grad_norm_, the optimizer's step. Returns the
    parameters, the last norm and the fallbacks the device steps took."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4)).to(device)
    forward = torch.compile(model, backend="spyre") if compiled else model
    x, t = torch.randn(8, 16).to(device), torch.randint(0, 4, (8,)).to(device)
    opt = make_optimizer(model.parameters())
    torch.spyre.reset_fallback_counts()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(forward(x), t).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return [p.detach().cpu() for p in model.parameters()], norm.cpu(), torch.spyre.fallback_counts()


OPTIMIZERS = {  # name: (the device's, the CPU's reference: the single-tensor loop)
    "sgd momentum": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4),
                     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4, foreach=False)),
    "sgd fused": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4, fused=True),
                  lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4, foreach=False)),
    "sgd fused nesterov": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, fused=True),
                           lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=False)),
    "sgd fused plain": (lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
                        lambda p: torch.optim.SGD(p, lr=0.1, foreach=False)),
    "adamw": (lambda p: torch.optim.AdamW(p, lr=1e-2), lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False)),
    "adamw fused": (lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
                    lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False)),
    "adamw fused amsgrad": (lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, weight_decay=0.1, fused=True),
                            lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, weight_decay=0.1, foreach=False)),
    "adam fused maximize": (lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, maximize=True, fused=True),
                            lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, maximize=True, foreach=False)),
}


@pytest.mark.parametrize("name,compiled", [(name, False) for name in OPTIMIZERS] +
                         [(name, True) for name in ("sgd momentum", "adamw", "adamw fused")])
def test_optimizer_steps_run_on_the_device_as_on_the_cpu(name, compiled):
    torch._dynamo.reset()
    device_opt, cpu_opt = OPTIMIZERS[name]
    want, want_norm, _ = train("cpu", cpu_opt)
    got, got_norm, fallbacks = train("spyre", device_opt, compiled=compiled)
    assert fallbacks == {}
    assert_close(got_norm, want_norm, atol=1e-6, rtol=1e-5)
    for g, w in zip(got, want):  # within 1e-4 of the largest, the fp32 tolerance
        assert (g - w).abs().max().item() <= 1e-4 * w.abs().max().item()


def test_a_fused_step_with_found_inf_leaves_every_tensor_as_it_was():
    # What GradScaler passes when the scaled gradients overflowed: the step is skipped
    # on the device, without reading found_inf back.
    p, g = torch.randn(5).to("spyre"), torch.randn(5).to("spyre")
    m, v, step = torch.zeros(5, device="spyre"), torch.zeros(5, device="spyre"), torch.ones((), device="spyre")
    before = [t.cpu() for t in (p, m, v)]
    kw = dict(lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    no_fallback(torch._fused_adamw_, [p], [g], [m], [v], [], [step], **kw,
                grad_scale=torch.tensor(4.0, device="spyre"), found_inf=torch.tensor(1.0, device="spyre"))
    for t, b in zip((p, m, v), before):
        assert torch.equal(t.cpu(), b)
    # With found_inf 0 the gradient is unscaled first: the step equals an unscaled one's.
    g4 = (g * 4)
    q, q_ref = p.clone(), p.clone()
    m2, v2, m3, v3 = (torch.zeros(5, device="spyre") for _ in range(4))
    torch._fused_adamw_([q], [g4], [m2], [v2], [], [step], **kw, grad_scale=torch.tensor(4.0, device="spyre"),
                        found_inf=torch.tensor(0.0, device="spyre"))
    torch._fused_adamw_([q_ref], [g], [m3], [v3], [], [step], **kw)
    assert_close(q.cpu(), q_ref.cpu())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_vector_norms_and_the_foreach_pointwise_ops(dtype):
    tol = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=4e-3, rtol=4e-3),
           torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}[dtype]
    x = rand((7, 33), dtype, 1)
    for ord in (2, 1, float("inf"), float("-inf")):
        for dim in (None, 1, (0, 1)):
            want = torch.linalg.vector_norm(x.float(), ord, dim).to(dtype)
            assert_close(no_fallback(torch.linalg.vector_norm, x.to("spyre"), ord, dim).cpu(), want, **tol)
    assert_close(no_fallback(torch.linalg.vector_norm, x.to("spyre"), 2, 1, True, dtype=torch.float32).cpu(),
                 torch.linalg.vector_norm(x, 2, 1, True, dtype=torch.float32), **tol)
    a, b, c = (rand((7, 33), dtype, s) for s in (2, 3, 4))
    c = c.abs() + 0.5
    dev = [t.to("spyre") for t in (a, b, c)]
    for fn in (lambda p, q, r: torch.addcmul(p, q, r, value=-0.3), lambda p, q, r: torch.addcdiv(p, q, r, value=2.5),
               lambda p, q, r: torch.lerp(p, q, 0.3), lambda p, q, r: torch.lerp(p, q, 0.9)):
        want = fn(*(t.float() for t in (a, b, c))).to(dtype)
        assert_close(no_fallback(fn, *dev).cpu(), want, **tol)
    y = dev[0].clone()
    no_fallback(y.addcdiv_, dev[1], dev[2], value=0.5)
    assert_close(y.cpu(), torch.addcdiv(a.float(), b.float(), c.float(), value=0.5).to(dtype), **tol)
    with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
        torch.addcdiv(torch.ones(3, dtype=torch.int32, device="spyre"), torch.ones(3, dtype=torch.int32, device="spyre"),
                      torch.ones(3, dtype=torch.int32, device="spyre"))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_lerp_with_a_tensor_weight_takes_the_cpus_formula_per_element(dtype):
    # |w| < 0.5: self + w (end - self); else end - (end - self)(1 - w); weights on both
    # sides of 0.5 and beyond [0, 1].
    a, b = rand((6, 7), dtype, 1), rand((6, 7), dtype, 2)
    w = (torch.linspace(-1.5, 2.0, 42).reshape(6, 7)).to(dtype)
    want = torch.lerp(a.float(), b.float(), w.float()).to(dtype)
    tol = {torch.float32: dict(atol=1e-6, rtol=1e-6), torch.float16: dict(atol=2e-3, rtol=2e-3),
           torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}[dtype]
    assert_close(no_fallback(torch.lerp, a.to("spyre"), b.to("spyre"), w.to("spyre")).cpu(), want, **tol)
    y = a.to("spyre")
    no_fallback(y.lerp_, b.to("spyre"), w.to("spyre"))
    assert_close(y.cpu(), want, **tol)
    # A 0-d weight on the host, as CUDA allows: its value.
    w0 = torch.tensor(0.7, dtype=dtype)
    assert_close(no_fallback(torch.lerp, a.to("spyre"), b.to("spyre"), w0).cpu(),
                 torch.lerp(a.float(), b.float(), w0.float()).to(dtype), **tol)


def kernels(fn, *args, **kw):
    """fn's result and the (name, launches) of the kernels it ran, with no fallback."""
    torch.spyre.synchronize()
    torch.ops.spyre.reset_device_stats(0)
    out = no_fallback(fn, *args, **kw)
    torch.spyre.synchronize()
    report = json.loads(torch.ops.spyre.run_report(0, "foreach", 0.0))
    return out, [(k["name"], int(k["launches"])) for k in report["kernels"]]


# Lists of five tensors of different shapes: a 0-d one, a transposed (non-contiguous)
# one, one with a single element and two of many tiles.
SHAPES = [(), (40, 3), (1,), (5000,), (33, 65)]


def tensors(dtype, seed, positive=False):
    out = [rand(s, dtype, seed + i, positive) for i, s in enumerate(SHAPES)]
    out[1] = out[1].t()
    return out


S = [0.5, -1, 2, 3.25, 0]  # one scalar per tensor of the lists

FOREACH = {  # name: (fn(xs, ys, zs, sel, s0), in place); sel picks the scalars of the tensors
    # run, s0 is a 0-d spyre tensor
    "add.List": (lambda x, y, z, sel, s0: torch._foreach_add(x, y, alpha=0.5), False),
    "add_.Scalar": (lambda x, y, z, sel, s0: torch._foreach_add_(x, 1.5), True),
    "add_.Tensor": (lambda x, y, z, sel, s0: torch._foreach_add_(x, s0, alpha=2), True),
    "sub.ScalarList": (lambda x, y, z, sel, s0: torch._foreach_sub(x, sel(S)), False),
    "mul_.ScalarList": (lambda x, y, z, sel, s0: torch._foreach_mul_(x, sel(S)), True),
    "mul.Tensor": (lambda x, y, z, sel, s0: torch._foreach_mul(x, s0), False),
    "div_.List": (lambda x, y, z, sel, s0: torch._foreach_div_(x, z), True),
    "addcmul_.Scalar": (lambda x, y, z, sel, s0: torch._foreach_addcmul_(x, y, z, value=-0.3), True),
    "addcdiv.ScalarList": (lambda x, y, z, sel, s0: torch._foreach_addcdiv(x, y, z, sel(S)), False),
    "addcdiv_.Tensor": (lambda x, y, z, sel, s0: torch._foreach_addcdiv_(x, y, z, torch.tensor(sel(S))), True),
    "lerp_.Scalar": (lambda x, y, z, sel, s0: torch._foreach_lerp_(x, y, 0.3), True),
    "lerp.List": (lambda x, y, z, sel, s0: torch._foreach_lerp(x, y, z), False),
    "sqrt": (lambda x, y, z, sel, s0: torch._foreach_sqrt(z), False),
    "neg_": (lambda x, y, z, sel, s0: torch._foreach_neg_(x), True),
    "sigmoid": (lambda x, y, z, sel, s0: torch._foreach_sigmoid(x), False),
    "maximum.List": (lambda x, y, z, sel, s0: torch._foreach_maximum(x, y), False),
    "minimum_.Scalar": (lambda x, y, z, sel, s0: torch._foreach_minimum_(x, 0.25), True),
    "clamp_min.ScalarList": (lambda x, y, z, sel, s0: torch._foreach_clamp_min(x, sel(S)), False),
    "clamp_max_.List": (lambda x, y, z, sel, s0: torch._foreach_clamp_max_(x, z), True),
}


@pytest.mark.parametrize("name", FOREACH)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_foreach_op_is_one_launch_with_the_per_tensor_ops_results(name, dtype):
    # What PyTorch's own loop gives, one tensor (and one launch) at a time, bit for bit;
    # and the CPU's, within the dtype's rounding.
    fn, in_place = FOREACH[name]
    xs, ys, zs = tensors(dtype, 10), tensors(dtype, 20), tensors(dtype, 30, positive=True)
    s0 = torch.tensor(1.25, dtype=dtype)
    dev = [[t.to("spyre") for t in ts] for ts in (xs, ys, zs)]
    loop = [[t.clone() for t in ts] for ts in dev]
    out, launched = kernels(fn, *dev, lambda v: v, s0.to("spyre"))
    assert launched == [(f"aten::_foreach_{name} (5 kernels)", 1)]
    got = dev[0] if in_place else out
    for i in range(len(SHAPES)):
        one = fn(*[[ts[i]] for ts in loop], lambda v: [v[i]], s0.to("spyre"))
        assert torch.equal(got[i].cpu(), (loop[0][i] if in_place else one[0]).cpu())
    tol = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=4e-3, rtol=4e-3),
           torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}[dtype]
    cpu = [[t.float() for t in ts] for ts in (xs, ys, zs)]
    cpu_out = fn(*cpu, lambda v: v, s0.float())
    for g, w in zip(got, cpu[0] if in_place else cpu_out):
        assert_close(g.cpu().float(), w, **tol)


@pytest.mark.parametrize("ord", [2, 1, math.inf], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_foreach_norm_is_two_launches_for_any_number_of_tensors_and_matches_the_cpu(dtype, ord):
    # Tensors of many sizes (one element, one tile and a bit, several cores' shares):
    # clip_grad_norm_'s per-parameter norms. The norms of the same values computed in
    # fp64 on the CPU, rounded once to the dtype, within the fp32 sums' and the dtype's
    # rounding. (Not the CPU's fp32 norms: their own summation error depends on the
    # host's vector width, 5.7e-6 of the L1 norm of 250,000 values on an AVX-512 host
    # against the device's 4.4e-6, which put them 1.008e-5 apart.)
    shapes = [(1,), (3, 5), (64, 3, 7, 7), (70000,), (250, 1000), (7,)] * 3
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
    norms, launched = kernels(torch._foreach_norm, [x.to("spyre") for x in xs], ord)
    assert launched == [("aten::_foreach_norm", 1)] * 2  # partial sums, then the norms
    for got, x in zip(norms, xs):
        assert got.dtype == dtype and got.shape == ()
        want = torch.linalg.vector_norm(x.double(), ord).to(dtype)
        assert_close(got.cpu().float(), want.float(), rtol={torch.float32: 1e-5}.get(dtype, 1e-2), atol=0)
    # dtype=float32 for half tensors: the fp32 norms, not rounded to the input's dtype.
    half = [x.to(torch.float16) for x in xs[:4]]
    norms, _ = kernels(torch._foreach_norm, [x.to("spyre") for x in half], ord, dtype=torch.float32)
    for got, x in zip(norms, half):
        assert got.dtype == torch.float32
        assert_close(got.cpu(), torch.linalg.vector_norm(x.float(), ord), rtol=1e-5, atol=0)


def test_foreach_norm_of_lists_the_kernel_does_not_take_runs_pytorchs_loop():
    # Order 3, a non-contiguous tensor, an empty one: PyTorch's loop, each norm still
    # on the device (linalg_vector_norm's kernels), nothing on the CPU.
    x = torch.randn(6, 4)
    for ts, ord in [([x, x[:2]], 3), ([x.t(), x], 2), ([x, torch.empty(0)], 2)]:
        torch.spyre.reset_fallback_counts()
        norms = torch._foreach_norm([t.to("spyre") for t in ts], ord)
        assert torch.spyre.fallback_counts() == {}
        for got, t in zip(norms, ts):
            assert_close(got.cpu(), torch.linalg.vector_norm(t, ord), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layers", [10, 40])
def test_clip_grad_norm_takes_the_same_launches_whatever_the_number_of_parameters(layers):
    torch.manual_seed(3)
    cpu = torch.nn.Sequential(*[torch.nn.Linear(30, 30) for _ in range(layers)])
    dev = copy.deepcopy(cpu).to("spyre")
    for p, q in zip(cpu.parameters(), dev.parameters()):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.to("spyre")
    want = torch.nn.utils.clip_grad_norm_(cpu.parameters(), 1.0)
    got, launched = kernels(torch.nn.utils.clip_grad_norm_, dev.parameters(), 1.0)
    assert_close(got.cpu(), want, rtol=1e-5, atol=0)
    for p, q in zip(cpu.parameters(), dev.parameters()):
        assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-7)
    # The per-parameter norms (two launches), the stack of them, their norm, the clip
    # coefficient and one scaling of every gradient: none of it per parameter.
    names = [n for n, _ in launched]
    assert ("aten::_foreach_norm", 1) in launched and f"aten::_foreach_mul_.Tensor ({2 * layers} kernels)" in names
    assert sum(n for _, n in launched) <= 12, launched


def test_foreach_lists_whose_tensors_share_memory_split_the_launch_and_give_the_loops_results():
    # The kernels of one launch run at once on different cores: a tensor written twice,
    # or overlapping views, must not share one.
    a, b = torch.randn(10), torch.randn(10)
    da, db = a.to("spyre"), b.to("spyre")
    _, launched = kernels(torch._foreach_add_, [da, da], [db, db])
    assert launched == [("aten::_foreach_add_.List", 1), ("aten::_foreach_add_.List", 1)]
    assert_close(da.cpu(), a + 2 * b)
    x = torch.randn(12)
    dx = x.to("spyre")
    _, launched = kernels(torch._foreach_mul_, [dx[:6], dx[3:9], dx[9:]], 2.0)
    assert launched == [("aten::_foreach_mul_.Scalar", 1), ("aten::_foreach_mul_.Scalar (2 kernels)", 1)]
    x[:6] *= 2
    x[3:9] *= 2
    x[9:] *= 2
    assert_close(dx.cpu(), x)


def test_foreach_lists_the_device_cannot_group_run_tensor_by_tensor_as_before():
    # int64 tensors (two int32 words each on the device), and a list with a CPU tensor.
    ints = [torch.arange(5), torch.arange(3)]
    out, _ = kernels(torch._foreach_add, [t.to("spyre") for t in ints], 2)
    assert [o.cpu().tolist() for o in out] == [[2, 3, 4, 5, 6], [2, 3, 4]]
    # PyTorch's loop takes each tensor where it is, as it does for CUDA.
    out, _ = kernels(torch._foreach_add, [torch.ones(2, device="spyre"), torch.ones(2)], 1.0)
    assert [o.device.type for o in out] == ["spyre", "cpu"]
    assert [o.cpu().tolist() for o in out] == [[2, 2], [2, 2]]


@pytest.mark.parametrize("name,launches", [("sgd momentum", 4), ("sgd fused", 2), ("adamw", 8), ("adamw fused", 3)])
def test_an_optimizer_step_takes_a_few_launches_whatever_the_number_of_parameters(name, launches):
    # 20 parameters: PyTorch's foreach step is one launch per _foreach op; the fused
    # steps one per phase (the step counts' increment, SGD's buffers, Adam's moments,
    # the parameters).
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(10)]).to("spyre")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = OPTIMIZERS[name][0](model.parameters())
    opt.step()  # (SGD's first step makes its buffers)
    _, launched = kernels(opt.step)
    assert sum(n for _, n in launched) == launches
    assert all(k.endswith("(20 kernels)") or k.endswith("(40 kernels)") for k, _ in launched)
