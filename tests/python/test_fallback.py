"""The CPU fallback: results match the CPU, in-place and out= work, counts are readable."""

import warnings

import pytest

import torch


def test_fallback_ops_match_cpu_and_are_counted():
    torch.spyre.reset_fallback_counts()
    x = torch.arange(20).reshape(4, 5)  # int64: no device kernels
    d = x.to("spyre")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = (d * 2 + 1).relu().cumsum(dim=1)
    assert torch.equal(y.cpu(), (x * 2 + 1).relu().cumsum(dim=1))
    counts = torch.spyre.fallback_counts()
    assert any(name.startswith("aten::mul") for name in counts)
    assert any(name.startswith("aten::cumsum") for name in counts)
    assert all(n > 0 for n in counts.values())
    torch.spyre.reset_fallback_counts()
    assert torch.spyre.fallback_counts() == {}


def test_in_place_and_out_variants_update_the_device_tensor():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = torch.ones(3, device="spyre")
        d.add_(2)
        assert torch.equal(d.cpu(), torch.full((3,), 3.0))
        out = torch.empty(3, device="spyre")
        torch.mul(d, d, out=out)
        assert torch.equal(out.cpu(), torch.full((3,), 9.0))
        col = torch.zeros(3, 2, device="spyre")[:, 1]
        col.add_(5)  # in place on a view with gaps
        assert torch.equal(col.cpu(), torch.full((3,), 5.0))


def test_each_op_warns_once():
    torch.spyre.reset_fallback_counts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = torch.ones(3, device="spyre")
        torch.floor(d)  # no spyre kernel
        torch.floor(d)
    floor_warnings = [w for w in caught if "aten::floor" in str(w.message)]
    # The warning is issued once per op for the whole process (it may have fired in
    # an earlier test already).
    assert len(floor_warnings) <= 1
    counts = torch.spyre.fallback_counts()
    assert sum(n for name, n in counts.items() if name.startswith("aten::floor")) == 2


def test_resnet18_runs_through_the_fallback_and_matches_cpu():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expect = model(x)
        got = model.to("spyre")(x.to("spyre")).cpu()
    assert torch.allclose(got, expect, rtol=1e-4, atol=1e-4)


def test_int64_operands_run_on_the_cpu_and_are_counted():
    a = torch.randn(4, 5)
    b = torch.randn(5)
    torch.spyre.reset_fallback_counts()
    assert torch.equal((a.to("spyre") + b.to("spyre")).cpu(), a + b)  # broadcasting: on the device
    assert torch.equal(torch.add(a.to("spyre"), a.to("spyre"), alpha=2).cpu(), torch.add(a, a, alpha=2))
    assert torch.spyre.fallback_counts() == {}
    ints = torch.arange(6)
    assert torch.equal((ints.to("spyre") * ints.to("spyre")).cpu(), ints * ints)  # int64
    assert torch.spyre.fallback_counts() == {"aten::mul": 1}


def test_the_warning_stays_once_per_process_after_a_reset_and_names_an_unsupported_dtype():
    # A fresh process, so the once-per-process warnings have not fired yet.
    import subprocess
    import sys

    script = """
import warnings, torch, spyre_sim
warnings.simplefilter("always")
d = torch.ones(3, device="spyre")
torch.ceil(d)                      # no spyre kernel: warns
torch.spyre.reset_fallback_counts()
torch.ceil(d)                      # counted again, not warned again
print("ceil count", sum(n for k, n in torch.spyre.fallback_counts().items() if k.startswith("aten::ceil")))
torch.div(torch.ones(3, dtype=torch.float64, device="spyre"), 2.0)  # div has kernels, not for float64
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ceil count 1" in r.stdout
    assert len([line for line in r.stderr.splitlines() if "aten::ceil" in line and "no spyre kernel" in line]) == 1
    div = [line for line in r.stderr.splitlines() if "aten::div" in line]
    assert div and all("for these arguments" in line and "no spyre kernel" not in line for line in div)


def test_batch_norm_in_training_updates_the_running_statistics_as_on_the_cpu():
    # native_batch_norm's schema does not mark running_mean/var as written: a plain
    # fallback would leave the device's copies at zeros and ones.
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3)
    dev = torch.nn.BatchNorm2d(3).to("spyre")
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5) * 2 + 0.5
        torch.testing.assert_close(dev(x.to("spyre")).cpu(), cpu(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)
    assert int(dev.num_batches_tracked) == 3
    dev.eval()
    cpu.eval()
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(dev(x.to("spyre")).cpu(), cpu(x), rtol=1e-4, atol=1e-4)


def test_an_op_on_the_cpu_fallback_refuses_tensors_of_two_devices_before_it_runs():
    x = torch.randn(4, 4, device="spyre")
    before = dict(torch.spyre.fallback_counts())
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*spyre:0 and cpu"):
        torch.atan2(x, torch.randn(4, 4))  # atan2 has no spyre kernel: the fallback's check
    assert torch.spyre.fallback_counts() == before  # refused before it ran
    # 0-d CPU tensors are scalars, and indexing may keep its indices on the CPU, as for CUDA.
    torch.testing.assert_close(torch.atan2(x, torch.tensor(2.0)).cpu(), torch.atan2(x.cpu(), torch.tensor(2.0)))
    idx = torch.tensor([0, 2])
    torch.testing.assert_close(x[idx].cpu(), x.cpu()[idx])


def test_an_op_on_the_cpu_fallback_refuses_an_output_that_partly_overlaps_an_input():
    # As PyTorch's CPU kernels do: the fallback would compute from a copy and write the
    # result back over the input it was still reading. Identical tensors are fine.
    x = torch.arange(8, dtype=torch.float64).to("spyre")  # float64: no spyre kernel
    before = dict(torch.spyre.fallback_counts())
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the written-to"):
        torch.atan2(x[0:4], x[4:], out=x[1:5])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        x[1:5].atan2_(x[0:4])
    assert torch.spyre.fallback_counts() == before
    assert x.cpu().tolist() == list(range(8))  # nothing written
    y = x.clone()
    y.atan2_(y)  # the same tensor in and out
    torch.testing.assert_close(y.cpu(), torch.atan2(x.cpu(), x.cpu()))
    torch.atan2(x[0:4], x[4:], out=x[0:4])
    torch.testing.assert_close(x[0:4].cpu(), torch.atan2(torch.arange(4.0, dtype=torch.float64),
                                                        torch.arange(4.0, 8.0, dtype=torch.float64)))
