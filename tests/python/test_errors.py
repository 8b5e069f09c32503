"""Errors reach the user: device faults as RuntimeError with the fault record, driver
errors with the driver's explanation; the device stays usable."""

import os
import subprocess
import sys

import pytest
import torch


def test_a_device_fault_surfaces_at_the_next_synchronizing_call_and_the_device_recovers():
    # SPYRE_ALLOC_CACHING=0 gives the tensor its own allocation, so the 64 KiB read
    # overruns it precisely.
    code = """
import torch, spyre_sim
t = torch.ones(16, device="spyre")
torch.ops.spyre._inject_fault(t)
try:
    torch.spyre.synchronize()
except RuntimeError as e:
    print("ERROR", e)
u = torch.arange(4.0, device="spyre")
print("AFTER", u.cpu().tolist())
"""
    env = dict(os.environ, SPYRE_ALLOC_CACHING="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ERROR" in out.stdout
    assert "kernel 'spyre::_inject_fault' faulted on core" in out.stdout
    assert "dma_load" in out.stdout  # the faulting instruction
    assert "past the end of a 64-byte allocation" in out.stdout  # the nearest allocation
    assert "AFTER [0.0, 1.0, 2.0, 3.0]" in out.stdout


def test_launch_blocking_raises_in_the_op_that_faulted():
    code = """
import torch, spyre_sim
t = torch.ones(16, device="spyre")
try:
    torch.ops.spyre._inject_fault(t)
    print("NO ERROR")
except RuntimeError as e:
    print("RAISED", e)
"""
    env = dict(os.environ, SPYRE_ALLOC_CACHING="0", SPYRE_LAUNCH_BLOCKING="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "RAISED spyre: spyre::_inject_fault: kernel 'spyre::_inject_fault' faulted" in out.stdout


def test_allocator_switches_no_cache_and_poison():
    code = """
import torch, spyre_sim
a = torch.empty(100, device="spyre")
print(torch.spyre.memory_reserved() == torch.spyre.memory_allocated())
print(torch.isnan(a.cpu()).all().item())
"""
    env = dict(os.environ, SPYRE_ALLOC_CACHING="0", SPYRE_ALLOC_POISON="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_driver_errors_carry_the_drivers_explanation():
    with pytest.raises(RuntimeError, match="out of range"):
        torch.spyre.set_device(7)
