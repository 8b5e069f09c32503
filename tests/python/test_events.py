"""Events: record, query, synchronize, elapsed_time in simulated milliseconds."""

import torch


def test_event_lifecycle_and_elapsed_time():
    e0, e1 = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    assert e0.query()  # never recorded: complete
    host = torch.ones(8 << 20, dtype=torch.uint8)
    dev = torch.empty(8 << 20, dtype=torch.uint8, device="spyre")
    e0.record()
    dev.copy_(host)
    e1.record()
    e1.synchronize()
    assert e1.query()
    ms = e0.elapsed_time(e1)
    # 8 MiB over PCIe Gen5 x16 at 85% (53.6 GB/s) into 4 channels of 12.8 GB/s x 0.73
    # (37.4 GB/s, the bottleneck): about 0.22 ms, plus latencies and command overheads.
    assert 0.2 < ms < 0.3


def test_events_order_work_across_streams():
    s = torch.spyre.Stream()
    done = torch.spyre.Event()
    host = torch.arange(1 << 20, dtype=torch.int32)
    dev = torch.empty(1 << 20, dtype=torch.int32, device="spyre")
    default = torch.spyre.current_stream()
    torch.accelerator.set_stream(s)
    dev.copy_(host)
    done.record(s)
    torch.accelerator.set_stream(default)
    default.wait_event(done)
    out = dev.cpu()  # on the default stream, after the side stream's copy
    assert torch.equal(out, host)


def test_elapsed_time_is_deterministic():
    def measure():
        e0, e1 = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
        host = torch.ones(1 << 20, dtype=torch.uint8)
        dev = torch.empty(1 << 20, dtype=torch.uint8, device="spyre")
        torch.spyre.synchronize()
        e0.record()
        dev.copy_(host)
        e1.record()
        return e0.elapsed_time(e1)

    assert measure() == measure()
