"""conv1d and conv2d on the compute arrays (backend/aten/conv_ops.cpp: one implicit-GEMM
kernel whose A panels are gathered from the input by DMA) and their gradients: strides,
padding, dilation, groups, bias, channels-last and strided inputs, against the float64
CPU convolution of the same values within fp32-accumulation tolerance, and without
falling back."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import spyre_sim
from test_matmul import tol
from test_pointwise import FLOATS, rand


def check(fn, x, w, b=None, k=1, **kw):
    """fn(x, w, b, **kw) on the device against float64 on the CPU; no fallback."""
    dev = [t.to("spyre") if t is not None else None for t in (x, w, b)]
    torch.spyre.reset_fallback_counts()
    got = fn(*dev, **kw)
    counts = torch.spyre.fallback_counts()
    want = fn(*[t.double() if t is not None else None for t in (x, w, b)], **kw).to(x.dtype)
    assert got.device.type == "spyre" and got.shape == want.shape and got.dtype == want.dtype
    assert_close(got.cpu().double(), want.double(), **tol(x.dtype, k))
    assert counts == {}, counts
    return got


CASES = [  # input shape, weight shape, stride, padding, dilation, groups
    ((2, 3, 9, 11), (5, 3, 3, 3), 1, 1, 1, 1),              # 3x3, same-size output
    ((1, 3, 20, 18), (8, 3, 7, 7), 2, 3, 1, 1),             # a ResNet stem: 7x7, stride 2
    ((2, 6, 8, 9), (4, 6, 1, 1), 1, 0, 1, 1),               # 1x1
    ((1, 4, 13, 12), (6, 4, 3, 2), (1, 2), (2, 0), (2, 1), 1),  # uneven kernel, stride, padding, dilation
    ((2, 8, 7, 7), (6, 4, 3, 3), 1, 1, 1, 2),               # two groups
    ((1, 5, 9, 8), (10, 1, 3, 3), 2, 1, 1, 5),              # depthwise, channel multiplier 2
    ((1, 64, 12, 10), (40, 64, 3, 3), 1, 1, 1, 1),          # K = 576: K chunks cross tap rows
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CASES)
def test_conv2d_matches_the_cpu(dtype, xs, ws, stride, padding, dilation, groups):
    x, w, b = rand(xs, dtype, 1), rand(ws, dtype, 2), rand((ws[0],), dtype, 3)
    k = ws[1] * ws[2] * ws[3]
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check(F.conv2d, x, w, b, k=k, **args)
    check(F.conv2d, x, w, None, k=k, **args)


GRAD_CASES = CASES + [
    ((2, 4, 10, 10), (3, 4, 3, 3), 3, 1, 1, 1),  # stride 3: rows the last window never reaches
    ((2, 4, 11, 10), (3, 4, 2, 2), 2, 0, 1, 1),  # an even kernel, one row and column unreached
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", GRAD_CASES)
def test_conv2d_gradients_are_convolutions_on_the_device(xs, ws, stride, padding, dilation, groups):
    # The input's, the weight's and the bias's gradients through autograd (fp32) against
    # float64 on the CPU: the input's is a convolution of the dilated output gradient
    # with the flipped weights, the weight's a GEMM of the implicit im2col matrix.
    x, w, b = rand(xs, torch.float64, 1), rand(ws, torch.float64, 2), rand((ws[0],), torch.float64, 3)
    args = (stride, padding, dilation, groups)
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    y = F.conv2d(*ref, *args)
    gy = rand(tuple(y.shape), torch.float64, 4)
    y.backward(gy)
    dev = [t.float().to("spyre").requires_grad_() for t in (x, w, b)]
    torch.spyre.reset_fallback_counts()
    F.conv2d(*dev, *args).backward(gy.float().to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    k = ws[1] * ws[2] * ws[3]
    for d, r, n in zip(dev, ref, (ws[0] * ws[2] * ws[3], y.numel() // ws[0], y.numel() // ws[0])):
        assert d.grad.shape == r.grad.shape
        assert_close(d.grad.cpu().double(), r.grad, **tol(torch.float32, max(n, k)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_conv1d_and_conv2d_gradients_in_every_dtype(dtype):
    for fn, xs, ws, kw in ((F.conv2d, (2, 6, 9, 8), (4, 3, 3, 3), dict(stride=2, padding=1, groups=2)),
                           (F.conv1d, (2, 4, 30), (6, 4, 5), dict(stride=2, padding=2))):
        x, w = rand(xs, dtype, 1), rand(ws, dtype, 2)
        ref = [t.float().clone().requires_grad_() for t in (x, w)]
        y = fn(*ref, **kw)
        gy = rand(tuple(y.shape), dtype, 3)
        y.backward(gy.float())
        dev = [t.to("spyre").requires_grad_() for t in (x, w)]
        torch.spyre.reset_fallback_counts()
        fn(*dev, **kw).backward(gy.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        for d, r in zip(dev, ref):
            assert d.grad.dtype == dtype
            scale = r.grad.abs().max().item()
            assert (d.grad.cpu().float() - r.grad).abs().max().item() <= {torch.float32: 1e-5, torch.float16: 4e-3,
                                                                          torch.bfloat16: 3e-2}[dtype] * scale


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_conv1d_and_same_padding(dtype):
    x, w, b = rand((2, 4, 50), dtype, 1), rand((6, 4, 5), dtype, 2), rand((6,), dtype, 3)
    check(F.conv1d, x, w, b, k=20, stride=2, padding=2)
    check(F.conv1d, x, w, b, k=20, padding="same", dilation=3)
    x2 = rand((1, 3, 10, 12), dtype, 4)
    check(F.conv2d, x2, rand((4, 3, 3, 5), dtype, 5), None, k=45, padding="same")


def test_inputs_of_any_layout_and_the_channels_last_result():
    x, w = rand((2, 6, 9, 10), torch.float32, 1), rand((4, 6, 3, 3), torch.float32, 2)
    want = F.conv2d(x.double(), w.double(), padding=1)
    for layout in (lambda t: t, lambda t: t.to(memory_format=torch.channels_last),
                   lambda t: t.transpose(2, 3).contiguous().transpose(2, 3),  # H and W swapped in memory
                   lambda t: t.repeat_interleave(2, dim=3)[..., ::2]):  # every other column of a wider one
        got = F.conv2d(layout(x.to("spyre")), layout(w.to("spyre")), padding=1)
        assert_close(got.cpu().double(), want, **tol(torch.float32, 54))
    # The result is stored channels-last, as the kernel writes it; its values and every
    # view of it are the CPU's.
    got = F.conv2d(x.to("spyre"), w.to("spyre"), padding=1)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert_close(got.flatten(1).cpu().double(), want.flatten(1), **tol(torch.float32, 54))


def test_a_padding_free_channels_last_convolution_is_one_kernel_reading_its_input_once():
    # A 1x1 convolution of a channels-last input needs no copies: one kernel, which reads
    # the input (2 x 16 x 14 x 14 fp16) and the weights once. It is the product of the
    # input's pixels [392 x 16] and the weights [16 x 32], and moves what that mm moves.
    x = rand((2, 16, 14, 14), torch.float16, 1).to("spyre").to(memory_format=torch.channels_last)
    w = rand((32, 16, 1, 1), torch.float16, 2).to("spyre").to(memory_format=torch.channels_last)
    report = spyre_sim.run(lambda a, b: F.conv2d(a, b), x, w)
    assert [k["name"] for k in report["kernels"]] == ["aten::convolution"]
    m = report["metrics"]
    assert m["dram_read_bytes"] == 2 * 16 * 14 * 14 * 2 + 32 * 16 * 2
    pixels, weights = x.permute(0, 2, 3, 1).reshape(392, 16), w.reshape(32, 16).t()
    mm = spyre_sim.run(torch.mm, pixels, weights)
    assert [k["name"] for k in mm["kernels"]] == ["aten::mm"]
    for key in ("dram_read_bytes", "dram_write_bytes"):
        assert m[key] == mm["metrics"][key], key


def test_nchw_weights_are_permuted_once_and_again_after_every_kind_of_write():
    # A convolution reads its weights as [out, kh, kw, in]; of NCHW weights that is a
    # device copy, kept while the weights' storage is unwritten (runtime/derived.h).
    # Every way of writing the weights must drop it, including those that do not bump
    # the parameter's version counter (p.data), partial writes (a slice, at an address
    # inside the storage) and weights that are a view into a larger flat storage.
    torch.manual_seed(0)
    x = torch.randn(2, 8, 9, 9).to("spyre").contiguous(memory_format=torch.channels_last)  # no padding copy
    flat = torch.randn(3 * 16 * 8 * 3 * 3)
    conv = torch.nn.Conv2d(8, 16, 3, bias=False).to("spyre")
    fresh = torch.nn.Conv2d(8, 16, 3, bias=False).to("spyre")

    def copies(module):
        report = spyre_sim.run(module, x, warmup=0)
        return [k["name"] for k in report["kernels"]].count("aten::copy_")

    assert copies(fresh) == 1 and copies(fresh) == 0 and copies(fresh) == 0

    def same(w_dev):
        got = F.conv2d(x, w_dev)
        want = F.conv2d(x.cpu().double(), w_dev.cpu().double()).float()
        # (fp32 accumulation of 72 products; stale weights would be off by their change)
        assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())

    w = conv.weight
    same(w)
    w.data.mul_(2)                       # a kernel, through .data: no version bump
    same(w)
    w.data.fill_(0.25)                   # a fill
    same(w)
    with torch.no_grad():
        w.copy_(torch.randn(16, 8, 3, 3))  # a copy from the host
    same(w)
    w.data[5, 3:].zero_()                # a partial write, past the storage's first byte
    same(w)
    with torch.no_grad():
        w[7].copy_(w[2] * 3)             # a device-to-device copy into a slice
    same(w)
    opt = torch.optim.SGD([w], lr=0.5, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        F.conv2d(x, w).square().sum().backward()
        opt.step()
        same(w)
    # Weights that are the middle third of a flat storage, written from elsewhere in it.
    base = flat.to("spyre")
    view = base[16 * 8 * 9:2 * 16 * 8 * 9].view(16, 8, 3, 3)
    same(view)
    base[16 * 8 * 9 + 100:16 * 8 * 9 + 300].mul_(-3)
    same(view)
    base[:].add_(1)
    same(view)
    # A new storage at a freed one's address is not taken for it.
    for _ in range(3):
        fresh_w = torch.randn(16, 8, 3, 3).to("spyre")
        same(fresh_w)
        del fresh_w


def test_a_resnet_basic_block_runs_on_the_device_eager_and_compiled():
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1, bias=False), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8, 16, 16)
    with torch.no_grad():
        want = block.double()(x.double())
        block = block.float().to("spyre")
        torch.spyre.reset_fallback_counts()
        eager = block(x.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        compiled = torch.compile(block, backend="spyre")
        got = compiled(x.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
    for y in (eager, got):
        assert_close(y.cpu().double(), want, **tol(torch.float32, 144))


def test_convolution_errors_and_what_still_runs_on_the_cpu():
    x, w = torch.randn(1, 4, 8, 8), torch.randn(3, 4, 3, 3)
    with pytest.raises(RuntimeError, match="same"):
        F.conv2d(x.to("spyre"), w)  # weight on the CPU
    with pytest.raises(RuntimeError, match="channels"):
        F.conv2d(x.to("spyre"), torch.randn(3, 5, 3, 3).to("spyre"))
    # Transposed and 3-D convolutions have no device kernel yet: the CPU's, counted.
    torch.spyre.reset_fallback_counts()
    got = F.conv_transpose2d(x.to("spyre"), w.transpose(0, 1).contiguous().to("spyre"))
    assert torch.spyre.fallback_counts() == {"aten::convolution_overrideable": 1}
    wt = w.transpose(0, 1).contiguous().to("spyre").requires_grad_()
    F.conv_transpose2d(x.to("spyre"), wt).sum().backward()
    assert "aten::convolution_backward_overrideable" in torch.spyre.fallback_counts()
    assert_close(got.cpu(), F.conv_transpose2d(x, w.transpose(0, 1).contiguous()), atol=1e-5, rtol=1e-5)


def conv_bn_act(conv, act, batch_norm=True):
    """conv, then a batch norm in evaluation with running statistics far from 0 and 1
    (and random affine parameters), then act: what a torchvision model's layers are."""
    layers = [conv]
    if batch_norm:
        bn = torch.nn.BatchNorm2d(conv.out_channels)
        with torch.no_grad():
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
        layers.append(bn)
    if act is not None:
        layers.append(act)
    return torch.nn.Sequential(*layers).eval()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", ["bn+relu", "bias+bn+silu", "grouped bn", "relu only", "bn+hardswish"])
def test_a_compiled_convolution_batch_norm_and_activation_are_one_kernel(dtype, case):
    # The batch norm folded into a per-channel scale and shift (two small kernels over
    # the channels), applied with the activation in the convolution's epilogue: no batch
    # norm or activation pass over the feature map. The eager fp32 CPU model's values,
    # within the dtype's rounding (the eager device model rounds more often).
    torch._dynamo.reset()
    torch.manual_seed(4)
    conv = {"bn+relu": torch.nn.Conv2d(8, 16, 3, padding=1, bias=False),
            "bias+bn+silu": torch.nn.Conv2d(8, 16, 3, stride=2),
            "grouped bn": torch.nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False),
            "relu only": torch.nn.Conv2d(8, 16, 1),
            "bn+hardswish": torch.nn.Conv2d(8, 16, 3, padding=1, groups=8, bias=False)}[case]
    act = {"bn+relu": torch.nn.ReLU(), "bias+bn+silu": torch.nn.SiLU(), "grouped bn": None,
           "relu only": torch.nn.ReLU(), "bn+hardswish": torch.nn.Hardswish()}[case]
    model = conv_bn_act(conv, act, batch_norm=case != "relu only")
    x = rand((2, 8, 12, 10), dtype, 3)
    with torch.no_grad():
        want = model(x.float())
        dev = model.to(dtype).to("spyre")
        compiled = torch.compile(dev, backend="spyre")
        torch.spyre.reset_fallback_counts()
        got = compiled(x.to("spyre"))
        assert torch.spyre.fallback_counts() == {}
        assert_close(got.cpu().float(), want, **{torch.float32: dict(atol=1e-4, rtol=1e-4),
                                                 torch.float16: dict(atol=1e-2, rtol=1e-2),
                                                 torch.bfloat16: dict(atol=8e-2, rtol=3e-2)}[dtype])
        report = spyre_sim.run(compiled, x.to("spyre"))
    names = [k["name"] for k in report["kernels"]]
    parts = {"bn+relu": "bn,relu", "bias+bn+silu": "bn,silu", "grouped bn": "bn", "relu only": "bias,relu",
             "bn+hardswish": "bn,hardswish"}[case]
    assert f"spyre::conv[{parts}]" in names, names
    assert not any("batch_norm" in n or n in ("aten::relu", "aten::silu", "aten::hardswish") for n in names), names
    # The convolution and at most the scale's and the shift's kernels, besides the copy
    # of the input into its zero-bordered channels-last buffer that padding takes.
    assert len([n for n in names if n not in ("aten::copy_", "aten::fill_")]) <= 3, names


def test_conv_epilogue_checks_its_operands():
    x, w = torch.randn(1, 4, 6, 6, device="spyre"), torch.randn(8, 4, 3, 3, device="spyre")
    b = torch.randn(8, device="spyre")
    args = ([1, 1], [1, 1], [1, 1], 1)
    with pytest.raises(RuntimeError, match="unknown activation 'swish'"):
        torch.ops.spyre.conv_epilogue(x, w, b, None, *args, "swish")
    with pytest.raises(RuntimeError, match="a scale needs a bias"):
        torch.ops.spyre.conv_epilogue(x, w, None, torch.ones(8, device="spyre"), *args, "")
    with pytest.raises(RuntimeError, match="the scale must be 8 float32 values"):
        torch.ops.spyre.conv_epilogue(x, w, b, torch.ones(8, device="spyre", dtype=torch.float16), *args, "")
    with pytest.raises(RuntimeError, match="the bias must be 8 float values"):
        torch.ops.spyre.conv_epilogue(x, w, torch.ones(7, device="spyre"), None, *args, "")
    # Still working, and what the op computes: relu(conv x s + b).
    s = torch.rand(8, device="spyre") + 0.5
    got = torch.ops.spyre.conv_epilogue(x, w, b, s, *args, "relu")
    want = torch.relu(F.conv2d(x.cpu(), w.cpu(), padding=1) * s.cpu().view(-1, 1, 1) + b.cpu().view(-1, 1, 1))
    assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
