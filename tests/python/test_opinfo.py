"""PyTorch's OpInfo samples (op_db) for every op with a spyre device kernel, run on spyre
and on the CPU and compared: the project's device-generic test class, instantiated for
spyre by PyTorch's own machinery. Each sample also runs non-contiguous.

The run prints, per op, the samples run, skipped, and run with an op falling back to
the CPU (pytest's terminal summary);
test_skips_stay_under_ten_percent checks that no op skips more than 10%.

Run just these: tools/dev run python3 -m pytest tests/python/test_opinfo.py
"""

import collections

import pytest
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.utils import _pytree as pytree



def _table_names():
    """The OpInfo names of every unary, binary and comparison op of the backend's op
    table (backend/aten/op_table.h through torch.ops.spyre.fusible_ops): a row added
    there is tested here with no edit (nn.functional.<name> when OpInfo files it so)."""
    known = {op.name for op in op_db}
    names = set()
    for row in torch.ops.spyre.fusible_ops():
        family, overload = row.split(" ")[:2]
        if family in ("unary", "binary", "compare"):
            name = overload.split(".")[0]
            names.add(name if name in known else f"nn.functional.{name}")
    return names


# The ops of the kernel-compiler issue, by OpInfo name (every variant of each): the op
# table's, and those with kernels of their own.
NAMES = _table_names() | {
    "mm", "bmm", "addmm", "matmul", "nn.functional.linear", "baddbmm", "addmv", "mv", "where", "nn.functional.gelu",
    "clamp", "sum", "mean", "amax", "amin", "softmax", "log_softmax", "contiguous", "to", "nn.functional.layer_norm",
    "any", "all",
}
# The LLM-inference issue's generation and sampling ops, also in bool and int32 (bool logic on
# the device; bitwise ops of integers on the CPU, counted).
GENERATION = {"nn.functional.rms_norm", "index_copy", "index_put", "masked_fill", "__rpow__", "argmax", "argmin", "max", "min", "arange", "logical_and", "logical_or", "logical_xor", "logical_not",
              "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "topk", "sort", "argsort", "cumsum", "gather",
              "take_along_dim", "linspace"}
# The CNN-and-training issue's ops: convolutions, normalisation, pooling, the hard
# activations, the losses cross_entropy builds on and the optimizers' pointwise ops.
CNN = {"nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.batch_norm", "nn.functional.max_pool2d",
       "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "nn.functional.hardswish", "nn.functional.hardsigmoid", "nn.functional.hardtanh",
       "nn.functional.relu6", "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.group_norm", "nn.functional.cross_entropy", "addcmul", "addcdiv", "lerp",
       "linalg.vector_norm"}
# Ops whose indices may order equal values either way.
ORDERING = {"topk", "sort", "argsort"}
OPS = [op for op in op_db if op.name in NAMES]
GENERATION_OPS = [op for op in op_db if op.name in GENERATION]
CNN_OPS = [op for op in op_db if op.name in CNN]
ACCUMULATING = {"mm", "bmm", "addmm", "matmul", "nn.functional.linear", "baddbmm", "addmv", "mv", "sum", "mean",
                "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.conv1d", "nn.functional.conv2d",
                "nn.functional.batch_norm", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d", "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.group_norm", "linalg.vector_norm"}

# fp32 ops whose CPU results depend on the host: compared against the result computed
# in fp64 and rounded once, which is the same on every host. (A grouped conv2d sample
# matched the CPU's fp32 on an earlier host and was 2.2e-5 from it on an AVX-512 one,
# outside fp32's default tolerance. matmul's CPU fp32 sums match the device's, and an
# exact reference would flag their cancellation instead, so it keeps the CPU's.)
HOST_DEPENDENT = {"nn.functional.conv1d", "nn.functional.conv2d"}


def soft_target_error_bound(sample, dtype):
    """cross_entropy with probability targets is a composite (log_softmax, products with
    the targets and weights, a sum), each step rounded to the sample's 16-bit dtype on
    the device and on the CPU alike. When the weighted terms nearly cancel, the result
    is their rounding noise (a bf16 sample: CPU -0.918, fp32 -0.809, spyre -0.863): the
    rounded sum's error bound, a few units of the dtype's epsilon times the sum of the
    terms' magnitudes, is the tolerance then. 0 for class-index targets."""
    target = sample.args[0]
    if target.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return 0.0
    dim = 1 if sample.input.dim() > 1 else 0
    terms = (torch.log_softmax(sample.input.float(), dim) * target.float()).abs()
    weight = sample.kwargs.get("weight")
    if weight is not None:
        shape = [1] * terms.dim()
        shape[dim] = -1
        terms = terms * weight.float().abs().view(shape)
    size = terms.sum()
    if sample.kwargs.get("reduction", "mean") == "mean":
        size = size / (sample.input.shape[0] if sample.input.dim() > 1 else 1)
    return 4 * torch.finfo(dtype).eps * size.item()
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# op name (with variant) -> [samples run, samples skipped, samples run with a CPU fallback]
STATS = collections.defaultdict(lambda: [0, 0, 0])


def to(device):
    return lambda x: x.detach().to(device) if isinstance(x, torch.Tensor) else x


def skip_reason(op, sample):
    """Why a sample cannot be compared with the CPU, or None. Every skip says why."""
    tensors = [t for t in pytree.tree_leaves((sample.input, sample.args, sample.kwargs)) if isinstance(t, torch.Tensor)]
    if any(t.dtype.is_complex for t in tensors):
        return "complex tensors: the device has no complex dtypes (and the CPU fallback is not what is tested)"
    return None


class TestSpyreOpInfo(TestCase):
    @ops(OPS, allowed_dtypes=DTYPES)
    def test_matches_cpu(self, device, dtype, op):
        self.compare_samples(device, dtype, op)

    @ops(GENERATION_OPS, allowed_dtypes=DTYPES + (torch.bool, torch.int32))
    def test_generation_op_matches_cpu(self, device, dtype, op):
        self.compare_samples(device, dtype, op)

    @ops(CNN_OPS, allowed_dtypes=DTYPES)
    def test_cnn_op_matches_cpu(self, device, dtype, op):
        self.compare_samples(device, dtype, op)

    def compare_samples(self, device, dtype, op):
        key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        # Samples are made on the CPU (random ops on spyre would run there anyway) and
        # copied: the same values on both sides.
        for sample in op.sample_inputs("cpu", dtype):
            for variant in (sample, sample.noncontiguous()):
                reason = skip_reason(op, variant)
                if reason:
                    STATS[key][1] += 1
                    continue
                if op.name not in ACCUMULATING or (dtype == torch.float32 and op.name not in HOST_DEPENDENT):
                    want = op(variant.input, *variant.args, **variant.kwargs)
                else:
                    # Products, reductions and softmax: the reference computes wider and
                    # rounds once. fp16/bf16 in fp32 (opmath), as the device does; PyTorch's
                    # CPU kernels round partial results of some (bf16 mv: 0.44 away on a sum
                    # of 10 products that nearly cancels). fp32 convolutions in fp64 (below).
                    wide = torch.float64 if dtype == torch.float32 else torch.float32
                    up = variant.transform(lambda x: x.to(wide) if isinstance(x, torch.Tensor) and x.dtype == dtype else x)
                    want = pytree.tree_map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype == wide else x,
                                           op(up.input, *up.args, **up.kwargs))
                dev = variant.transform(to(device))
                torch.spyre.reset_fallback_counts()
                got = op(dev.input, *dev.args, **dev.kwargs)
                if torch.spyre.fallback_counts():
                    STATS[key][2] += 1
                got_cpu = pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, got)
                # fp16/bf16 matmuls and reductions accumulate in fp32 on the device; the
                # CPU's own orders and roundings differ (a few ulps of the dtype).
                tol = {} if dtype == torch.float32 else dict(atol=1e-2, rtol=1.6e-2)
                if op.name == "nn.functional.cross_entropy" and dtype != torch.float32:
                    tol["atol"] = max(tol["atol"], soft_target_error_bound(variant, dtype))
                if op.name in ORDERING and dtype != torch.float32:
                    # Equal values (frequent in 16-bit samples) come in index order on
                    # spyre, in an order the CPU's partial sort leaves open: the values
                    # must match, and the indices must point at them.
                    got_cpu, want = self.same_order_of_equals(op, variant, got_cpu, want)
                self.assertEqual(got_cpu, want, exact_device=False, **tol,
                                 msg=lambda m: f"{key} {dtype} sample {variant.summary()}: {m}")
                STATS[key][0] += 1


    def same_order_of_equals(self, op, variant, got, want):
        dim = variant.kwargs.get("dim", variant.args[1] if op.name == "topk" and len(variant.args) > 1 else
                                 variant.args[0] if op.name != "topk" and variant.args else -1)
        x = variant.input
        if op.name == "argsort":
            got_i, want_i = got, want
        else:
            (got_v, got_i), (want_v, want_i) = got, want
            self.assertEqual(got_v, want_v, exact_device=False)
        if x.dim() == 0:
            return got, want
        self.assertEqual(x.gather(dim, got_i), x.gather(dim, want_i), exact_device=False)
        return want, want


instantiate_device_type_tests(TestSpyreOpInfo, globals(), only_for=["spyre"])  # a list: a string matches substrings


def test_skips_stay_under_ten_percent():
    if not STATS:
        pytest.skip("the OpInfo tests did not run in this session")
    over = {k: v for k, v in STATS.items() if v[1] > 0.10 * (v[0] + v[1])}
    assert not over, over
