"""spyre_sim.run: a user's model on the simulated device, reported as spyre-sim run does."""

import json

import pytest
import torch

import spyre_sim


def test_run_reports_a_users_model(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).half()
    x = torch.randn(16, 64).half()
    trace = tmp_path / "trace.json"
    report = spyre_sim.run(model, x, trace=trace, name="tiny-mlp")
    assert report["schema_version"] == 1 and report["workload"] == "tiny-mlp"
    m = report["metrics"]
    assert m["macs"] == 16 * 64 * 128 + 16 * 128 * 32  # the two linears, exactly
    assert m["cpu_fallbacks"] == 0 and m["cycles"] > 0
    names = [k["name"] for k in report["kernels"]]
    assert names.count("aten::addmm") == 2 and "aten::gelu" in names
    assert report["config"]["hash"] == json.loads(torch.ops.spyre.device_report(0))["config"]["hash"]
    text = spyre_sim.report_text(report)
    assert "modelled time" in text and "aten::addmm" in text
    # Cycle counts past 2^31 (a long run's kernel rows) print whole, not wrapped to negative.
    report["metrics"]["cycles"] = report["kernels"][0]["cycles"] = 3 * 2**31
    text = spyre_sim.report_text(report)
    assert f"= {3 * 2**31} cycles" in text and text.count(str(3 * 2**31)) == 2 and "-" + str(2**31)[:4] not in text
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("name", "").startswith("matmul") for e in events)


def test_run_counts_fallbacks_of_ops_without_kernels():
    report = spyre_sim.run(lambda t: torch.cumprod(t, 0), torch.randn(100))
    assert report["metrics"]["cpu_fallbacks"] == 1
    assert report["cpu_fallbacks"] == {"aten::cumprod.out": 1}  # the boxed fallback names the overload it ran


def test_the_roofline_counts_the_ops_least_traffic_so_wasted_bytes_show():
    import spyre_sim

    x = torch.randn(1024, 2048, dtype=torch.float16).to("spyre")
    y = torch.randn(1024, 2048, dtype=torch.float16).to("spyre")
    # An add moves exactly its least traffic: two inputs read, one output written once.
    k = spyre_sim.run(lambda: x + y)["kernels"][0]
    assert k["min_dram_bytes"] == 3 * 1024 * 2048 * 2
    assert k["traffic_ratio"] == pytest.approx(1.0)
    assert k["roofline_fraction"] > 0.95
    # A copy of every other column: its least traffic is the half it keeps, read once and
    # written once; the kernel's strided reads span every stick of the source, so it
    # moves 4 MiB read + 2 MiB written against the op's 2 + 2: 1.5x, below the roofline.
    k = spyre_sim.run(lambda: x[:, ::2].contiguous())["kernels"][0]
    assert k["min_dram_bytes"] == 2 * 1024 * 1024 * 2
    assert k["traffic_ratio"] == pytest.approx(1.5)
    assert k["roofline_fraction"] < 0.75
