"""A pytest plugin for running PyTorch's own test files on spyre (tests/torch_suites/run.py).

- Marks the tests listed in the expectations file (SPYRE_SUITE_EXPECTATIONS) as expected
  failures (strict: a test that starts passing fails the run, so the list only shrinks)
  or as skipped, each with its reason; or (kind "pass") clears PyTorch's own expected
  failure of a test that passes on spyre, so it must pass.
- Leaves out tests an earlier attempt already ran (SPYRE_SUITE_DONE, one node id per
  line): after a crash the runner restarts the file past the test that crashed.
- Appends one JSON line per event to SPYRE_SUITE_LOG ({"start": id} before a test runs,
  {"id", "outcome", "seconds"} after), so a crash still leaves the results so far and
  the name of the test that was running.
- With SPYRE_SUITE_DEVICE_OPS=1, keeps of the OpInfo-parametrised tests only those of
  ops with a spyre kernel (an aten op registered for PrivateUse1 that computes on the
  device; see DEVICE_KERNEL_EXCLUDED); tests not parametrised by an OpInfo stay.
- Enables TestCommon.test_compare_cpu for spyre: PyTorch marks it @onlyCUDA and
  @slowTest, but comparing a device's results with the CPU's on each op's reference
  inputs is exactly what a new backend needs. PyTorch's expected failures of that test
  (a device's kernels differing from the CPU's) are dropped for ops without a spyre
  kernel: those run on the CPU fallback, the CPU compared with itself.
- With SPYRE_SUITE_COVERAGE=<file>, writes the (op, dtype) pairs the selected tests run
  as JSON lines, for run.py's coverage check.
"""

import json
import os
import unittest

import pytest
import torch

# PrivateUse1 registrations that are not device computations: memory, views and
# metadata, copies, and the ops the backend runs on a CPU copy of its inputs (their
# results are copied back; PyTorch's own CPU kernels are what they test).
DEVICE_KERNEL_EXCLUDED = {
    "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "_reshape_alias", "as_strided", "empty",
    "empty_strided", "record_stream", "resize", "set", "unfold", "view", "view_as_complex", "view_as_real",
    "mode", "kaiser_window",
}

# aten kernels that PyTorch's OpInfos reach under another name.
OPINFO_NAME = {
    "_softmax": "softmax", "_log_softmax": "log_softmax", "_safe_softmax": "softmax",
    "native_layer_norm": "layer_norm", "native_dropout": "dropout", "native_dropout_backward": "dropout",
    "_int_mm": "mm", "_scaled_mm": "mm", "_index_put_impl_": "index_put",
}

# Device-kernel ops and dtypes that PyTorch's device-generic tests never run (no OpInfo,
# or random ops, which they test in float32 only), and the project's test that does.
COVERED_ELSEWHERE = {
    "_amp_foreach_non_finite_check_and_unscale_": ("float32", "tests/python/test_device.py (no OpInfo in PyTorch)"),
    "_amp_update_scale_": ("float32", "tests/python/test_device.py (no OpInfo in PyTorch)"),
    **{cell: ("float32 float64", "tests/python/test_rnn.py (no OpInfo in PyTorch; test_nn.py's LSTM and GRU tests run it)")
       for cell in ("_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell",
                    "_thnn_fused_gru_cell_backward")},
    **{op: ("float32 float16 bfloat16", "tests/python/test_attention.py (reached through scaled_dot_product_attention's "
                                         "choice of backend, not by an aten name an OpInfo carries)")
       for op in ("_scaled_dot_product_fused_attention_overrideable",
                  "_scaled_dot_product_fused_attention_overrideable_backward")},
    **{op: ("float32 float16 bfloat16", "tests/python/test_pointwise.py, test_activation_gradients_run_on_the_device_"
                                         "as_the_cpu (autograd's backward of the activation; no OpInfo carries the name)")
       for op in ("tanh_backward", "sigmoid_backward", "silu_backward", "gelu_backward", "threshold_backward")},
    "bernoulli": ("float16 bfloat16", "tests/python/test_random.py, test_each_random_op_draws_on_the_device_in_half_precision"),
    "dropout": ("float16 bfloat16", "tests/python/test_random.py, test_each_random_op_draws_on_the_device_in_half_precision"),
    "normal": ("float16 bfloat16", "tests/python/test_random.py, test_each_random_op_draws_on_the_device_in_half_precision"),
    "uniform": ("float16 bfloat16", "tests/python/test_random.py, test_each_random_op_draws_on_the_device_in_half_precision"),
    "exponential": ("float16 bfloat16", "tests/python/test_random.py, test_each_random_op_draws_on_the_device_in_half_precision"),
    "multinomial": ("float16 bfloat16", "tests/python/test_random.py, test_each_random_op_draws_on_the_device_in_half_precision"),
    "_assert_async": ("bool float32", "tests/python/test_sampling.py, multinomial's argument checks (no OpInfo in PyTorch)"),
    **{op: ("float32 float16 bfloat16", "tests/python/test_conv.py (conv1d and conv2d and their gradients; the CI "
                                         "selection leaves out the convolution OpInfos, nn.functional.conv*)")
       for op in ("convolution_overrideable", "convolution_backward_overrideable")},
    **{op: ("float32 float16 bfloat16", "tests/python/test_cnn.py, and test_opinfo.py's nn.functional.* OpInfo "
                                         "samples (which this CI selection leaves out; tools/dev torch-tests --full "
                                         "runs them)")
       for op in ("native_batch_norm", "_native_batch_norm_legit", "native_batch_norm_backward",
                  "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward",
                  "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "hardswish",
                  "hardsigmoid", "hardtanh", "hardswish_backward", "hardsigmoid_backward", "hardtanh_backward",
                  "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "mse_loss",
                  "mse_loss_backward", "native_group_norm", "native_group_norm_backward",
                  "_log_softmax_backward_data", "_softmax_backward_data")},
    **{op: ("float32 float16 bfloat16", "tests/python/test_optim.py (no OpInfo carries the name: "
                                         "torch.linalg.vector_norm's is linalg.vector_norm; the fused optimizer "
                                         "steps have none)")
       for op in ("linalg_vector_norm", "_fused_adamw_", "_fused_adam_", "_fused_sgd_")},
    "max_pool2d": ("float32 float16 bfloat16",
                   "tests/python/test_cnn.py, test_max_pool2d_without_a_gradient_runs_its_values_kernel_alone "
                   "(the CI selection leaves out nn.functional.max_pool2d; tools/dev torch-tests --full runs it)"),
    "embedding_dense_backward": ("float32 float16 bfloat16",
                                 "tests/python/test_indexing.py, test_embedding_gradients_sum_the_rows_of_each_index_"
                                 "on_the_device (no OpInfo carries the name: nn.functional.embedding's autograd "
                                 "reaches it)"),
    "native_layer_norm_backward": ("float32 float16 bfloat16",
                                   "tests/python/test_reductions.py, test_layer_norm_backward_runs_on_the_device "
                                   "(no OpInfo of its own: layer_norm's autograd reaches it)"),
}

# The dtypes spyre's vector and DMA units take (backend/aten/kernel_cache.h, device_dtype);
# the others run on the CPU fallback.
DEVICE_DTYPES = ("float32", "float16", "bfloat16", "int32", "int8", "bool")


def device_kernel_ops():
    """The ops with a spyre device kernel, named as OpInfos name them ("add" for
    aten::add.Tensor, "softmax" for aten::_softmax)."""
    names = set()
    for reg in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"):
        if reg.startswith("aten::"):
            base = reg[len("aten::"):].split(".")[0]
            if base.endswith("_") and (not base.startswith("_") or base.startswith("_foreach_")):
                base = base[:-1]  # (the in-place form: one OpInfo tests both; _foreach_add_ is _foreach_add's)
            names.add(base)
    return {OPINFO_NAME.get(n, n) for n in names - DEVICE_KERNEL_EXCLUDED}


def _op_and_dtype(item):
    """The OpInfo and dtype a device-type test was instantiated with, or (None, None).

    PyTorch's instantiated test keeps them as the default of its `param_kwargs`
    argument; decorators applied later wrap it (functools.wraps: `__wrapped__`)."""
    function = getattr(item, "obj", None)
    for _ in range(20):
        if function is None:
            break
        function = getattr(function, "__func__", function)
        defaults = getattr(function, "__defaults__", None) or ()
        if defaults and isinstance(defaults[0], dict) and "op" in defaults[0]:
            return defaults[0]["op"], defaults[0].get("dtype")
        function = getattr(function, "__wrapped__", None)
    return None, None


def _op_names(op):
    """The aten names an OpInfo exercises: its aten_name and name ("nn.functional.gelu": gelu)."""
    names = {getattr(op, "aten_name", None), op.name.removeprefix("nn.functional.").split(".")[0]}
    return {n.rstrip("_") if not n.startswith("_") else n for n in names if n}


def _drop_expected_failure(item):
    """Clears unittest's expectedFailure on a test and the functions it wraps; whether
    there was one."""
    function, cleared = getattr(item, "obj", None), False
    for _ in range(20):
        if function is None:
            break
        function = getattr(function, "__func__", function)
        if getattr(function, "__unittest_expecting_failure__", False):
            function.__unittest_expecting_failure__ = False
            cleared = True
        function = getattr(function, "__wrapped__", None)
    return cleared


def _enable_compare_cpu():
    """Makes test_compare_cpu run for spyre as for CUDA, slow-test gate lifted for it only,
    for every op of op_db (PyTorch runs it for the ops without a NumPy reference only,
    whose test_numpy_ref runs in float64) in every dtype the op declares (PyTorch runs
    one) — with SPYRE_SUITE_DEVICE_OPS=1 in every one the device computes (DEVICE_DTYPES)."""
    from torch.testing._internal import common_device_type, common_utils
    from torch.testing._internal.common_device_type import OpDTypes

    original = common_device_type.onlyCUDA
    spyre = torch._C._get_privateuse1_backend_name()

    def only_cuda(fn):
        if getattr(fn, "__name__", "") != "test_compare_cpu":
            return original(fn)
        parametrize = getattr(getattr(fn, "parametrize_fn", None), "__self__", None)  # the @ops decorator
        if isinstance(parametrize, common_device_type.ops):
            from torch.testing._internal.common_methods_invocations import op_db

            parametrize.op_list = list(op_db)
            parametrize.opinfo_dtypes = OpDTypes.supported
            if os.environ.get("SPYRE_SUITE_DEVICE_OPS") == "1":
                parametrize.allowed_dtypes = {getattr(torch, d) for d in DEVICE_DTYPES}

        def run(self, *args, **kwargs):
            if self.device_type not in ("cuda", spyre):
                raise unittest.SkipTest("Only runs on cuda or " + spyre)
            slow = common_utils.TEST_WITH_SLOW
            common_utils.TEST_WITH_SLOW = True
            try:
                return fn(self, *args, **kwargs)
            finally:
                common_utils.TEST_WITH_SLOW = slow

        run.__dict__.update(fn.__dict__)
        run.__name__, run.__qualname__, run.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        run.__wrapped__ = fn
        return run

    common_device_type.onlyCUDA = only_cuda


def _load_expectations(path):
    expected = {}
    if not path:
        return expected
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                kind, test_id, reason = (part.strip() for part in line.split("|", 2))
            except ValueError:
                raise pytest.UsageError(f"{path}:{number}: expected 'xfail|skip|pass | test id | reason', got {line!r}")
            if kind not in ("xfail", "skip", "pass") or not reason:
                raise pytest.UsageError(f"{path}:{number}: the kind is xfail, skip or pass and the reason is not empty")
            expected[test_id] = (kind, reason)
    return expected


class _Log:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8") if path else None

    def write(self, record):
        if self.file:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()


_LOG = _Log(os.environ.get("SPYRE_SUITE_LOG"))


def _short_id(nodeid):
    """file.py::Class::test (parametrisations kept), as the expectations file names them."""
    return nodeid.split("/")[-1]


def pytest_configure(config):
    _enable_compare_cpu()


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected theirs
def pytest_collection_modifyitems(config, items):
    expected = _load_expectations(os.environ.get("SPYRE_SUITE_EXPECTATIONS"))
    done = set()
    done_path = os.environ.get("SPYRE_SUITE_DONE")
    if done_path and os.path.exists(done_path):
        with open(done_path, encoding="utf-8") as f:
            done = {line.strip() for line in f if line.strip()}
    kernel_ops = device_kernel_ops()
    device_ops = kernel_ops if os.environ.get("SPYRE_SUITE_DEVICE_OPS") == "1" else None
    coverage = os.environ.get("SPYRE_SUITE_COVERAGE")
    covered = []
    kept, dropped = [], []
    for item in items:
        test_id = _short_id(item.nodeid)
        op, dtype = _op_and_dtype(item)
        # PyTorch's expected failures of test_compare_cpu are a device's own kernels
        # differing from the CPU's; an op without a spyre kernel runs on the CPU fallback,
        # which compares the CPU with itself, so they do not hold for spyre.
        if op is not None and "test_compare_cpu" in test_id and not _op_names(op) & kernel_ops:
            _drop_expected_failure(item)
        if op is not None and device_ops is not None and (op.name.startswith("_refs.") or
                                                          not _op_names(op) & device_ops):
            dropped.append(item)
            continue
        if op is not None and dtype is not None:
            supported = sorted(str(d).replace("torch.", "") for d in op.supported_dtypes("privateuse1"))
            covered.append({"op": sorted(_op_names(op)), "dtype": str(dtype).replace("torch.", ""),
                            "supported": supported, "id": test_id})
        if test_id in done:
            dropped.append(item)
            continue
        kept.append(item)
        if test_id in expected:
            kind, reason = expected[test_id]
            if kind == "xfail":
                item.add_marker(pytest.mark.xfail(reason=f"spyre: {reason}", strict=True, run=True))
            elif kind == "pass":  # PyTorch expects it to fail; on spyre it must pass
                if not _drop_expected_failure(item):
                    raise pytest.UsageError(f"expectations: 'pass | {test_id}', but PyTorch does not expect it to "
                                            "fail (any more): delete the line")
            else:
                item.add_marker(pytest.mark.skip(reason=f"spyre: {reason}"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if coverage:
        with open(coverage, "a", encoding="utf-8") as f:
            f.write(json.dumps({"device_ops": sorted(kernel_ops)}) + "\n")
            for record in covered:
                f.write(json.dumps(record) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A device fault is reported at the next synchronizing call, as on CUDA: synchronize
    after each test so a fault its work left pending fails that test (when nothing else
    did), never the next one."""
    outcome = yield
    try:
        torch.spyre.synchronize()
    except RuntimeError as fault:
        if outcome.excinfo is None:
            outcome.force_exception(fault)


def pytest_runtest_logstart(nodeid, location):
    _LOG.write({"start": _short_id(nodeid)})


def pytest_runtest_logreport(report):
    # One outcome per test: the call's, or the setup's when it did not get that far.
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfailed"
        elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            outcome = "xpassed"
        elif report.failed and report.when == "setup":
            outcome = "error"
        _LOG.write({"id": _short_id(report.nodeid), "outcome": outcome, "seconds": round(report.duration, 3)})
    elif report.when == "teardown" and report.failed:
        _LOG.write({"id": _short_id(report.nodeid), "outcome": "error", "seconds": round(report.duration, 3)})
