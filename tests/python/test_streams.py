"""Streams: pools, the per-thread current stream, overlap in simulated time."""

import threading

import torch


def test_streams_come_from_pools_and_are_spyre_streams():
    s = torch.spyre.Stream()
    high = torch.spyre.Stream(priority=-1)
    assert s.device_type == torch.spyre.current_stream().device_type
    assert s.stream_id != 0 and high.stream_id != s.stream_id
    assert torch.spyre.current_stream().stream_id == 0  # the default stream
    s.synchronize()
    assert s.query()


def test_the_current_stream_is_per_thread():
    side = torch.spyre.Stream()
    seen = {}

    def worker():
        seen["other"] = torch.spyre.current_stream().stream_id

    default = torch.spyre.current_stream()
    torch.accelerator.set_stream(side)
    try:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert torch.spyre.current_stream().stream_id == side.stream_id
        assert seen["other"] == 0
    finally:
        torch.accelerator.set_stream(default)


def test_two_streams_overlap_in_simulated_time_while_events_order_them():
    host = torch.ones(16 << 20, dtype=torch.uint8)
    a = torch.empty(16 << 20, dtype=torch.uint8, device="spyre")
    b = torch.empty(16 << 20, dtype=torch.uint8, device="spyre")
    s1, s2 = torch.spyre.Stream(), torch.spyre.Stream()
    default = torch.spyre.current_stream()
    start, mid1, end1, end2 = (torch.spyre.Event(enable_timing=True) for _ in range(4))
    torch.spyre.synchronize()
    start.record(default)
    s1.wait_event(start)
    s2.wait_event(start)
    torch.accelerator.set_stream(s1)
    a.copy_(host)
    mid1.record(s1)
    a.copy_(host)
    end1.record(s1)
    torch.accelerator.set_stream(s2)
    b.copy_(host)
    end2.record(s2)
    torch.accelerator.set_stream(default)
    torch.spyre.synchronize()
    one_copy = start.elapsed_time(mid1)
    both_on_s1 = start.elapsed_time(end1)
    on_s2 = start.elapsed_time(end2)
    assert one_copy > 0
    assert both_on_s1 > 1.9 * one_copy * 0.9  # in order on one stream
    assert on_s2 < both_on_s1  # the other stream ran alongside


def test_generic_torch_stream_and_event_work_for_spyre():
    s = torch.Stream(device="spyre")
    e = torch.Event(device="spyre", enable_timing=True)
    assert s.device_type == torch.spyre.current_stream().device_type
    e.record(s)
    e.synchronize()
    assert e.query() and s.query()


def test_stream_contexts_switch_and_restore_the_current_stream_and_device():
    base0 = torch.spyre.current_stream(0)
    s = torch.spyre.Stream(0)
    with torch.spyre.stream(s):
        assert torch.spyre.current_stream(0) == s
        x = torch.ones(4, device="spyre") + 1  # runs on s
    assert torch.spyre.current_stream(0) == base0
    with s as entered:  # the stream itself, as torch.cuda.Stream is
        assert entered is s and torch.spyre.current_stream(0) == s
    assert torch.spyre.current_stream(0) == base0
    torch.spyre.synchronize()
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))
    with torch.spyre.stream(None):  # no-op
        assert torch.spyre.current_stream(0) == base0
    # A stream of another device makes that device current inside the block.
    if torch.spyre.device_count() > 1:
        torch.spyre.set_device(0)
        s1 = torch.spyre.Stream(1)
        with torch.spyre.stream(s1):
            assert torch.spyre.current_device() == 1 and torch.spyre.current_stream(1) == s1
        assert torch.spyre.current_device() == 0
