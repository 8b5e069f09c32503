"""Which of PyTorch's test files run on spyre, and the part of each that CI runs.

An entry's `select` is a pytest -k expression (empty: the whole file); `--full` runs
every file whole (or its `full_select`). The CI selection is fixed so its time and counts are comparable
from run to run (tests/README.md has both runs' counts and commands).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    file: str
    select: str = ""
    # Of the tests parametrised by an OpInfo, only those of ops with a spyre device
    # kernel (spyre_suite_plugin.device_kernel_ops); the others run on the CPU fallback,
    # which tests PyTorch's CPU kernels, not spyre. --full runs them all.
    device_ops: bool = False
    # What --full runs (empty: the whole file).
    full_select: str = ""
    # Seconds the CI selection of the file takes beside other tests on a 2-core machine
    # (tests/README.md): ctest starts the longest first (its COST), so they end together.
    seconds: int = 60


CI = [
    Entry("test_view_ops.py", seconds=20),
    Entry("test_indexing.py", seconds=150),
    # test_linspace iterates a million-element device tensor in Python (all(cond): one
    # device-to-host copy per element, 80 s per dtype): --full only.
    Entry("test_tensor_creation_ops.py", "not test_linspace_spyre", seconds=40),
    Entry("test_reductions.py", seconds=240),
    # test_ops.py: TestCommon (out=, variants, non-contiguous samples, errors, dtypes and
    # test_compare_cpu, which the plugin enables for spyre). Its other classes test
    # PyTorch's composite and fake-tensor machinery, not a backend: left out of --full too.
    Entry("test_ops.py", "TestCommon", device_ops=True, full_select="TestCommon", seconds=600),
    Entry("test_binary_ufuncs.py", device_ops=True, seconds=390),
    Entry("test_unary_ufuncs.py", device_ops=True, seconds=270),
    # test_foreach.py: the _foreach ops with device kernels in the device's dtypes
    # (one launch per list); its integer, large-tensor and multi-device tests run
    # PyTorch's per-tensor loop and take 4 minutes more: --full.
    Entry("test_foreach.py", "float32 or float16 or bfloat16 or int32 or int8 or bool", device_ops=True, seconds=60),
]

# What `tools/dev test --full` adds to the CI selection (ctest label `full`): left out of
# the default run to keep a cold `tools/dev test` under 35 minutes on two cores. Their ops
# are covered without them: test_nn.py's convolution, batch-norm, pooling and loss tests
# run the same device kernels as tests/python's test_conv.py and test_cnn.py, and none is
# an OpInfo test the coverage check counts.
EXTENDED = [
    # test_nn.py: its device-generic class. The others (TestNN, ...) run on the CPU only
    # and test PyTorch's CPU kernels (a few minutes of 1 GB CPU tensors); --full keeps them.
    Entry("test_nn.py", "TestNNDeviceType", seconds=550),
]

# Files that run only by --full.
FULL_ONLY = []
