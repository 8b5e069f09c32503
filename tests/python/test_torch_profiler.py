"""torch.profiler on spyre: device kernels as PrivateUse1 activities with their simulated
durations, linked to the aten ops that launched them, device time in key_averages(),
device tracks in the exported Chrome trace, allocator memory events."""

import json

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


def model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64), torch.nn.Softmax(-1))
    return m.to("spyre")


def test_each_device_kernel_is_an_activity_linked_to_its_op_with_its_simulated_time(tmp_path):
    m, x = model(), torch.randn(32, 128, device="spyre")
    m(x)
    torch.spyre.synchronize()
    before = torch.spyre.report()["launches"]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True) as prof:
        m(x)
        torch.spyre.synchronize()
    report = torch.spyre.report()
    records = report["launch_records"][before - report["launches"]:]  # this run's launches
    kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    # Two addmm (linear), gelu, softmax: one kernel each, in order, with the simulated durations.
    assert [k.name for k in kernels] == [r["name"] + " kernel" for r in records]
    assert [k.name for k in kernels] == ["aten::addmm kernel", "aten::gelu kernel", "aten::addmm kernel",
                                         "aten::_softmax kernel"]
    for k, r in zip(kernels, records):
        simulated_us = (r["end_ps"] - r["start_ps"]) / 1e6
        assert k.time_range.elapsed_us() > 0
        assert abs(k.time_range.elapsed_us() - simulated_us) < 2e-3  # ns rounding
    # Each kernel belongs to the CPU op that launched it.
    ops = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.kernels]
    assert sorted(kernel.name for op in ops for kernel in op.kernels) == sorted(k.name for k in kernels)
    for op in ops:
        assert all(kernel.name == op.name + " kernel" for kernel in op.kernels)
    # key_averages: device time per op.
    rows = {row.key: row for row in prof.key_averages()}
    assert rows["aten::addmm"].self_device_time_total > 0
    assert rows["aten::gelu"].self_device_time_total > 0
    assert rows["aten::linear"].device_time_total >= rows["aten::addmm"].self_device_time_total
    assert "Self SPYRE" in prof.key_averages().table()
    # The allocator's events: the outputs' device memory.
    assert rows["aten::empty"].device_memory_usage > 0 or rows["aten::addmm"].device_memory_usage > 0
    # The Chrome trace: kernels on a track of device 0, named spyre:0.
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    device_kernels = [e for e in trace if e.get("cat") == "kernel"]
    assert len(device_kernels) == 4 and all(e["pid"] == 0 and e["dur"] > 0 for e in device_kernels)
    assert any(e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "spyre:0"
               for e in trace)


def test_kernels_on_two_streams_get_a_track_each():
    x = torch.randn(64, 64, device="spyre")
    s = torch.spyre.Stream()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = x + 1
        with torch.spyre.stream(s):
            z = x * 2
        torch.spyre.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    assert {k.name for k in kernels} == {"aten::add kernel", "aten::mul kernel"}
    assert len({k.device_resource_id for k in kernels}) == 2
    del y, z


def test_without_device_activities_nothing_is_recorded_and_the_legacy_profiler_works():
    x = torch.randn(64, 64, device="spyre")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + 1).sum()
        torch.spyre.synchronize()
    assert not [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    with torch.autograd.profiler.profile(use_device="spyre", use_kineto=True) as legacy:
        torch.relu(x)
        torch.spyre.synchronize()
    rows = {row.key: row for row in legacy.key_averages()}
    assert rows["aten::relu"].device_time_total > 0
    # Without Kineto, the legacy path times ops with device events (PyTorch 2.6 then
    # keeps the times only for a backend named "privateuseone"): it runs.
    with torch.autograd.profiler.profile(use_device="spyre") as legacy:
        torch.relu(x)
        torch.spyre.synchronize()
    assert "aten::relu" in {row.key for row in legacy.key_averages()}
