"""What CNNs need besides convolutions, on the device: batch norm in training (batch
statistics, running statistics updated in place, num_batches_tracked's int64 add) and
evaluation, max and average pooling, hardswish / hardsigmoid / hardtanh and their
gradients; then torchvision's resnet18, resnet50, mobilenet_v3_small and vit_b_16 at
224x224 end to end, eager and compiled, fp32 and fp16, against the CPU, with no
fallback. (The training step is test_training.py's.)"""

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch.testing import assert_close

from test_pointwise import FLOATS, rand

aten = torch.ops.aten


def no_fallback(fn, *args, **kw):
    torch.spyre.reset_fallback_counts()
    out = fn(*args, **kw)
    assert torch.spyre.fallback_counts() == {}
    return out


def close(dtype):
    return {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=4e-3, rtol=4e-3),
            torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}[dtype]


# ---- batch norm ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape,channels_last", [((6, 5), False), ((4, 3, 7), False), ((2, 4, 5, 6), False),
                                                  ((2, 4, 5, 6), True), ((2, 3, 2, 3, 4), False)])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_matches_the_cpu_and_updates_its_running_statistics(dtype, shape, channels_last, training):
    c = shape[1]
    x = rand(shape, dtype, 1) * 3 + 1
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    for param_dtype in {dtype, torch.float32}:  # the CPU's mixed type: fp32 parameters of a half input
        w, b = rand((c,), param_dtype, 2), rand((c,), param_dtype, 3)
        rm, rv = rand((c,), param_dtype, 4), rand((c,), param_dtype, 5).abs() + 0.5
        cpu_rm, cpu_rv = rm.clone(), rv.clone()
        want = aten.native_batch_norm(x, w, b, cpu_rm, cpu_rv, training, 0.1, 1e-5)
        dev_rm, dev_rv = rm.to("spyre"), rv.to("spyre")
        got = no_fallback(aten.native_batch_norm, x.to("spyre"), w.to("spyre"), b.to("spyre"), dev_rm, dev_rv,
                          training, 0.1, 1e-5)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype and g.shape == e.shape
            assert_close(g.cpu(), e, **close(dtype))
        assert got[0].is_contiguous(memory_format=torch.channels_last) == channels_last
        assert_close(dev_rm.cpu(), cpu_rm, **close(param_dtype))  # updated in place in training
        assert_close(dev_rv.cpu(), cpu_rv, **close(param_dtype))


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_norm_in_evaluation_is_three_kernels_with_the_cpus_values(affine):
    import spyre_sim
    x = rand((2, 5, 6, 7), torch.float32, 1) * 3 + 1
    w, b = (rand((5,), torch.float32, 2), rand((5,), torch.float32, 3)) if affine else (None, None)
    rm, rv = rand((5,), torch.float32, 4), rand((5,), torch.float32, 5).abs() + 0.5
    want = F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-3)
    dev = [t.to("spyre") if t is not None else None for t in (x, rm, rv, w, b)]
    bn = lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-3)  # noqa: E731
    got = no_fallback(bn, *dev)
    assert_close(got.cpu(), want, atol=1e-6, rtol=1e-6)
    report = spyre_sim.run(bn, *dev)  # the scale and shift from the running statistics, then y
    assert [k["name"] for k in report["kernels"]] == [
        "aten::native_batch_norm (scale)", "aten::native_batch_norm (shift)", "aten::native_batch_norm"]


def test_batch_norm_modules_learn_their_running_statistics_on_the_device():
    # The bug this replaced: training-mode batch norm left the device's running
    # statistics at their initial values (the CPU run's copies were dropped).
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4).train()
    dev = torch.nn.BatchNorm2d(4).train().to("spyre")
    for step in range(3):
        x = torch.randn(3, 4, 5, 6) * 2 + step
        want = bn(x)
        got = no_fallback(dev, x.to("spyre"))
        assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    assert_close(dev.running_mean.cpu(), bn.running_mean, atol=1e-6, rtol=1e-5)
    assert_close(dev.running_var.cpu(), bn.running_var, atol=1e-6, rtol=1e-5)
    assert dev.num_batches_tracked.dtype == torch.int64 and int(dev.num_batches_tracked) == 3
    # F.batch_norm in training mode, and without running statistics or affine parameters.
    rm, rv = torch.zeros(4, device="spyre"), torch.ones(4, device="spyre")
    x = torch.randn(3, 4, 5, 6)
    no_fallback(F.batch_norm, x.to("spyre"), rm, rv, training=True, momentum=0.3)
    cpu_rm, cpu_rv = torch.zeros(4), torch.ones(4)
    F.batch_norm(x, cpu_rm, cpu_rv, training=True, momentum=0.3)
    assert_close(rm.cpu(), cpu_rm), assert_close(rv.cpu(), cpu_rv)
    assert_close(no_fallback(F.batch_norm, x.to("spyre"), None, None, training=True).cpu(),
                 F.batch_norm(x, None, None, training=True), atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="running_mean and running_var must be defined"):
        aten.native_batch_norm(x.to("spyre"), None, None, None, None, False, 0.1, 1e-5)


def test_int64_adds_carry_between_the_words():
    v = torch.tensor([0, 1, -1, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**32, -2**32, 2**62, -2**63, 2**63 - 1,
                      123456789012345], dtype=torch.int64)
    w = v.flip(0)
    d, e = v.to("spyre"), w.to("spyre")
    for got, want in [(d + e, v + w), (d - e, v - w), (d + 1, v + 1), (d - 7, v - 7),
                      (torch.add(d, 5, alpha=3), torch.add(v, 5, alpha=3)), (d + (2**40 + 3), v + (2**40 + 3)),
                      (d[:, None] + e[None, ::2], v[:, None] + w[None, ::2])]:  # broadcast, strided
        assert torch.equal(got.cpu(), want)
    z = d.clone()
    no_fallback(z.add_, e)
    assert torch.equal(z.cpu(), v + w)


# ---- pooling ---------------------------------------------------------------------

POOLS = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False), (2, 2, 0, 1, False), (3, 1, 1, 1, False), ((3, 2), (2, 1), (1, 0), 1, False),
    (3, 2, 1, 2, False), (3, 2, 0, 1, True), (2, 3, 1, 1, True),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", POOLS)
def test_max_pool2d_values_and_indices_are_the_cpus(dtype, kernel, stride, padding, dilation, ceil):
    x = rand((2, 3, 9, 10), dtype, 1)
    x[0, 0, 0, :4] = float("nan")  # NaN wins, as on the CPU
    x[1, 2] = float("-inf")        # a window of -inf keeps its first tap inside the input
    x[0, 1, 3, 3] = x[0, 1, 3, 4]  # ties: the first in the window
    for layout in (x, x.to(memory_format=torch.channels_last), x[0]):
        want, want_i = F.max_pool2d(layout, kernel, stride, padding, dilation, ceil, return_indices=True)
        got, got_i = no_fallback(F.max_pool2d, layout.to("spyre"), kernel, stride, padding, dilation, ceil,
                                 return_indices=True)
        assert torch.equal(got_i.cpu(), want_i)
        assert_close(got.cpu(), want, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", POOLS[:3] + POOLS[4:6])
def test_max_pool2d_without_a_gradient_runs_its_values_kernel_alone(kernel, stride, padding, dilation, ceil):
    import spyre_sim
    x = rand((2, 3, 9, 10), torch.float32, 1)
    x[0, 0, 0, :4] = float("nan")
    x[1, 2] = float("-inf")
    x[0, 1, 3, 3] = x[0, 1, 3, 4]
    x[1, 0, :3, :3] = torch.tensor([[0.0, -0.0, 0.0], [-0.0, -0.0, 0.0], [0.0, 0.0, -0.0]])  # signed-zero ties
    x[1, 0, 3:6, :3] = -x[1, 0, :3, :3]
    want = F.max_pool2d(x, kernel, stride, padding, dilation, ceil)
    pool = lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil)  # noqa: E731
    with torch.no_grad():
        report = spyre_sim.run(pool, x.to("spyre"))
        got = no_fallback(pool, x.to("spyre")).cpu()
        compiled = no_fallback(torch.compile(pool, backend="spyre", fullgraph=True), x.to("spyre")).cpu()
    names = [k["name"] for k in report["kernels"]]  # (and a padding copy where the windows reach past x)
    assert "aten::max_pool2d" in names and not [n for n in names if "indices" in n]
    for result in (got, compiled):
        assert_close(result, want, equal_nan=True, atol=0, rtol=0)
        assert torch.equal(torch.signbit(result), torch.signbit(want))  # the first of tied zeros, as the CPU's
    # With a gradient to record, the indices are made and the gradient reaches the maxima.
    a, d = x.clone().requires_grad_(), x.to("spyre").requires_grad_()
    pool(a).nan_to_num(0.0).sum().backward()
    out = no_fallback(pool, d)
    assert_close(out.detach().cpu(), want, equal_nan=True, atol=0, rtol=0)
    out.nan_to_num(0.0).sum().backward()
    assert torch.equal(d.grad.cpu(), a.grad)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kernel,stride,padding,ceil,include_pad,divisor", [
    (3, 2, 1, False, True, None), (3, 2, 1, False, False, None), (2, 2, 0, False, True, None),
    (3, 2, 1, True, False, None), (3, 2, 1, True, True, None), ((3, 2), (1, 2), (1, 1), False, True, 5),
])
def test_avg_pool2d_matches_the_cpu(dtype, kernel, stride, padding, ceil, include_pad, divisor):
    x = rand((2, 3, 9, 10), dtype, 1)
    args = (kernel, stride, padding, ceil, include_pad, divisor)
    for layout in (x, x.to(memory_format=torch.channels_last)):
        got = no_fallback(F.avg_pool2d, layout.to("spyre"), *args)
        assert_close(got.cpu(), F.avg_pool2d(layout.float(), *args).to(dtype), **close(dtype))
    # The backward: each window's gradient over its divisor, to every position it covers.
    a = x.float().clone().requires_grad_()
    g = rand(tuple(F.avg_pool2d(a, *args).shape), torch.float32, 4)
    F.avg_pool2d(a, *args).backward(g)
    d = x.to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    F.avg_pool2d(d, *args).backward(g.to(dtype).to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    assert_close(d.grad.cpu().float(), a.grad, **close(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("size,out", [((2, 3, 8, 12), (2, 3)), ((3, 6, 6), (3, 6)), ((1, 4, 7, 7), (7, 1)),
                                      ((1, 2, 7, 7), (3, 3)), ((2, 3, 10, 9), (4, 5)), ((3, 5, 6), (4, 6))])
def test_adaptive_avg_pool2d_and_its_gradient_run_on_the_device(dtype, size, out):
    # Even windows (the output's sizes divide the input's) as average pools; uneven ones
    # (overlapping windows of different sizes) as matmuls by window matrices.
    x = rand(size, dtype, 1)
    a = x.float().clone().requires_grad_()
    want = F.adaptive_avg_pool2d(a, out)
    g = rand(tuple(want.shape), torch.float32, 2)
    want.backward(g)
    d = x.to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    got = F.adaptive_avg_pool2d(d, out)
    got.backward(g.to(dtype).to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    assert_close(got.detach().cpu().float(), want.detach(), **close(dtype))
    assert_close(d.grad.cpu().float(), a.grad, **close(dtype))
    # The CPU's values in the dtype itself, bit for bit for half inputs (the fp32 sums of
    # a few half values are exact, and each is divided by its window's size, as there).
    y = rand(size, dtype, 3)
    got = F.adaptive_avg_pool2d(y.to("spyre"), out).cpu()
    if dtype == torch.float32:
        assert_close(got, F.adaptive_avg_pool2d(y, out))
    else:
        assert torch.equal(got, F.adaptive_avg_pool2d(y, out))


# ---- activations -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_hard_activations_and_their_gradients_run_on_the_device(dtype):
    # (No x of exactly -3 or 3, nor NaN, in the gradients: there the CPU's own vectorised
    # and scalar hardswish_backward disagree (x >= 3 against x > 3; NaN, or the
    # gradient); the device takes the vectorised rule, which most elements of a CPU
    # tensor get. The forward values are checked there too.)
    x = torch.cat([torch.linspace(-5, 5, 100), torch.tensor([0.0])]).to(dtype)
    edges = torch.tensor([-3.0, 3.0, -2.0, 1.5, 0.0, 6.0, float("nan")], dtype=dtype)
    for f in (F.hardswish, F.hardsigmoid, F.relu6, lambda t: F.hardtanh(t, -2.0, 1.5)):
        assert_close(no_fallback(f, edges.to("spyre")).cpu(), f(edges), equal_nan=True, **close(dtype))
        a = x.clone().requires_grad_()
        d = x.to("spyre").requires_grad_()
        want = f(a)
        got = no_fallback(f, d)
        assert_close(got.cpu(), want, equal_nan=True, **close(dtype))
        g = torch.linspace(-1, 1, x.numel()).to(dtype)
        want.backward(g)
        no_fallback(got.backward, g.to("spyre"))
        assert_close(d.grad.cpu(), a.grad, equal_nan=True, **close(dtype))
    y = x.to("spyre")
    no_fallback(F.hardswish, y, inplace=True)
    assert_close(y.cpu(), F.hardswish(x), equal_nan=True, **close(dtype))
    with pytest.raises((RuntimeError, NotImplementedError), match="hardswish"):  # the CPU's own error
        F.hardswish(torch.arange(4, device="spyre"))


# ---- gradients ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_backward_matches_the_cpu(dtype, training):
    x = rand((3, 4, 5, 6), dtype, 1) * 2 + 1
    for layout in (x, x.to(memory_format=torch.channels_last)):
        for affine in (True, False):
            w = (rand((4,), torch.float32, 2) + 2).requires_grad_() if affine else None
            b = rand((4,), torch.float32, 3).requires_grad_() if affine else None
            rm, rv = rand((4,), torch.float32, 4), rand((4,), torch.float32, 5).abs() + 0.5
            a = layout.float().clone().requires_grad_()
            y = F.batch_norm(a, rm.clone(), rv.clone(), w, b, training=training)
            g = rand(tuple(y.shape), torch.float32, 6)
            y.backward(g)
            d = layout.to("spyre").requires_grad_()
            dw = w.detach().to("spyre").requires_grad_() if affine else None
            db = b.detach().to("spyre").requires_grad_() if affine else None
            torch.spyre.reset_fallback_counts()
            F.batch_norm(d, rm.to("spyre"), rv.to("spyre"), dw, db, training=training).backward(g.to(dtype).to("spyre"))
            assert torch.spyre.fallback_counts() == {}
            pairs = [(d, a)] + ([(dw, w), (db, b)] if affine else [])
            for got, want in pairs:
                assert_close(got.grad.cpu().float(), want.grad, **close(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_softmax_gradients_and_cross_entropy_run_on_the_device(dtype):
    x = rand((6, 11), dtype, 1)
    for f in (lambda t: F.log_softmax(t, 1), lambda t: F.softmax(t, 0), lambda t: F.log_softmax(t.float(), -1)):
        a, d = x.float().clone().requires_grad_(), x.to("spyre").requires_grad_()
        g = rand((6, 11), torch.float32, 2)
        f(a).backward(g)
        torch.spyre.reset_fallback_counts()
        out = f(d)
        out.backward(g.to(out.dtype).to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        assert_close(d.grad.cpu().float(), a.grad, **close(dtype))
    w = rand((11,), torch.float32, 3).abs() + 0.5
    for reduction in ("mean", "sum", "none"):
        for weight in (None, w):
            for ignore in (-100, 3):
                t = torch.tensor([1, 0, 10, ignore, 3, 3])
                a, d = x.float().clone().requires_grad_(), x.float().to("spyre").requires_grad_()
                want = F.cross_entropy(a, t, weight=weight, reduction=reduction, ignore_index=ignore)
                torch.spyre.reset_fallback_counts()
                got = F.cross_entropy(d, t.to("spyre"), weight=None if weight is None else weight.to("spyre"),
                                      reduction=reduction, ignore_index=ignore)
                g = rand(tuple(want.shape), torch.float32, 4)
                want.backward(g)
                got.backward(g.to("spyre"))
                assert torch.spyre.fallback_counts() == {}
                assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
                assert_close(d.grad.cpu(), a.grad, atol=1e-6, rtol=1e-5)
    # One sample ([C] and a 0-d target), as F.nll_loss takes it.
    assert_close(F.nll_loss(x.float().to("spyre")[0], torch.tensor(4, device="spyre")).cpu(),
                 F.nll_loss(x.float()[0], torch.tensor(4)))


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", POOLS)
def test_max_pool2d_backward_sends_each_gradient_to_its_index(kernel, stride, padding, dilation, ceil):
    x = rand((2, 3, 9, 10), torch.float32, 1)
    for layout in (x, x.to(memory_format=torch.channels_last)):
        a, d = layout.clone().requires_grad_(), layout.to("spyre").requires_grad_()
        y = F.max_pool2d(a, kernel, stride, padding, dilation, ceil)
        g = rand(tuple(y.shape), torch.float32, 2)
        y.backward(g)
        torch.spyre.reset_fallback_counts()
        F.max_pool2d(d, kernel, stride, padding, dilation, ceil).backward(g.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        # (Overlapping windows' gradients are added in another order than the CPU's.)
        assert_close(d.grad.cpu(), a.grad, atol=1e-6, rtol=1e-6)


# ---- torchvision models ------------------------------------------------------------

def calibrated(name):
    """A torchvision model with random weights, in evaluation mode. The CNNs' batch-norm
    statistics come from a training-mode batch (torchvision's initialisation otherwise
    leaves mobilenet's outputs near 1e-9, below fp16's range); vit_b_16's zero-initialised
    head gets small random weights (its output would otherwise be the bias alone)."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    if name == "vit_b_16":
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    else:
        with torch.no_grad():
            model.train()(torch.randn(2, 3, 224, 224))
    return model.eval()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16"])
def test_torchvision_models_run_on_the_device_eager_and_compiled(name):
    # 224x224 at batch 1 (batch 8: backend/bench/cnn_bench.py --check), in fp32 and fp16,
    # against the CPU's fp32 forward: within 1e-3 and 2e-2 of its largest value.
    model = calibrated(name)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        want = model(x)
        scale = want.abs().max().item()
        for dtype, tol in ((torch.float32, 1e-3), (torch.float16, 2e-2)):
            dev = model.to(dtype).to("spyre")
            for fn in (dev, torch.compile(dev, backend="spyre")):
                got = no_fallback(fn, x.to(dtype).to("spyre"))
                assert (got.cpu().float() - want).abs().max().item() <= tol * scale, (dtype, fn is dev)
            model = model.float().cpu()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_a_segmentation_cross_entropy_and_its_gradient_run_on_the_device(dtype, reduction):
    # [N, C, H, W] scores and [N, H, W] targets: nll_loss2d, with class weights and an
    # ignored pixel, against the CPU's fp32 loss and gradient.
    x = rand((2, 5, 3, 4), dtype, 1)
    t = torch.randint(0, 5, (2, 3, 4), generator=torch.Generator().manual_seed(2))
    t[0, 1, 2] = -100
    w = rand((5,), dtype, 3).abs() + 0.5
    want_x = x.float().clone().requires_grad_()
    want = F.cross_entropy(want_x, t, weight=w.float(), reduction=reduction)
    want.backward(torch.ones_like(want))
    d = x.to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    got = F.cross_entropy(d, t.to("spyre"), weight=w.to("spyre"), reduction=reduction)
    got.backward(torch.ones_like(got))
    assert torch.spyre.fallback_counts() == {}
    assert_close(got.cpu().float(), want.detach(), **close(dtype))
    assert_close(d.grad.cpu().float(), want_x.grad, **close(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_and_its_gradient_run_on_the_device(dtype, reduction):
    x, y = rand((4, 33), dtype, 1), rand((4, 33), dtype, 2)
    a = x.float().clone().requires_grad_()
    want = F.mse_loss(a, y.float(), reduction=reduction)
    g = rand(tuple(want.shape), torch.float32, 3)
    want.backward(g)
    d = x.to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    got = F.mse_loss(d, y.to("spyre"), reduction=reduction)
    got.backward(g.to(dtype).to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    assert_close(got.detach().cpu().float(), want.detach(), **close(dtype))
    assert_close(d.grad.cpu().float(), a.grad, **close(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("size,groups,affine", [((2, 6, 5, 4), 3, True), ((3, 8, 7), 2, False), ((2, 4, 3, 3), 4, True)])
def test_group_norm_and_its_gradients_run_on_the_device(dtype, size, groups, affine):
    x = rand(size, dtype, 1)
    w, b = rand((size[1],), dtype, 2) + 1, rand((size[1],), dtype, 3)
    cpu = [t.float().clone().requires_grad_() for t in (x, w, b)]
    want = F.group_norm(cpu[0], groups, cpu[1] if affine else None, cpu[2] if affine else None, eps=1e-5)
    g = rand(tuple(want.shape), torch.float32, 4)
    want.backward(g)
    dev = [t.to("spyre").requires_grad_() for t in (x, w, b)]
    torch.spyre.reset_fallback_counts()
    got = F.group_norm(dev[0], groups, dev[1] if affine else None, dev[2] if affine else None, eps=1e-5)
    got.backward(g.to(dtype).to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    assert_close(got.detach().cpu().float(), want.detach(), **close(dtype))
    for d, c in zip(dev if affine else dev[:1], cpu):
        assert_close(d.grad.cpu().float(), c.grad, **close(dtype))
