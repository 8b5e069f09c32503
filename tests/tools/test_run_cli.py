"""spyre-sim run / diff / sweep / sweep-merge and tools/plot: reports, the golden guard,
sweeps with a failing point, shards, plots, and what-if studies that must make
physical sense on the default chip."""

import csv
import json
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CI = str(REPO / "configs" / "spyre-ci.yaml")


def spyre_sim(*args, timeout=600):
    return subprocess.run(["spyre-sim", *args], capture_output=True, text=True, timeout=timeout)


def report(*args):
    r = spyre_sim("run", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_run_reports_time_traffic_kernels_and_energy(tmp_path):
    trace = tmp_path / "trace.json"
    r = spyre_sim("run", "--workload", "mlp:64,256,512,256", "--config", CI, "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    for line in ("modelled time", "DRAM", "cores", "CPU fallbacks        0", "energy", "aten::addmm", "aten::gelu"):
        assert line in r.stdout
    events = json.loads(trace.read_text())  # Perfetto / Chrome JSON
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("name", "").startswith("matmul") for e in events)
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    on = lambda track: [e for e in events if e.get("ph") == "X" and tracks.get(e["tid"]) == track]  # noqa: E731
    host, kernels = on("host"), on("kernels")
    # The host track has the aten ops in order; each is linked to the kernel it launched.
    # (The linear layers' biases are added inside the matmul kernels.)
    assert [e["name"] for e in host] == ["aten::addmm", "aten::gelu", "aten::addmm"]
    assert [e["name"] for e in kernels] == [e["name"] for e in host]
    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f"}
    assert len(starts) == len(host) and starts.keys() == ends.keys()
    for i, e in ends.items():
        assert tracks[starts[i]["tid"]] == "host" and tracks[e["tid"]] == "kernels"
        assert e["ts"] >= starts[i]["ts"]  # a kernel starts after the call that launched it

    j = report("--workload", "gemm:256,512,128,fp16", "--config", CI)
    assert j["schema_version"] == 1 and j["tool"] == "spyre-sim" and j["version"]
    assert j["config"]["hash"] and j["config"]["resolved"]["cores"]["count"] == 4
    m = j["metrics"]
    assert m["macs"] == 256 * 512 * 128                       # exactly the product's MACs
    assert m["dram_read_bytes"] >= (256 * 128 + 128 * 512) * 2  # at least A and B once
    assert m["dram_write_bytes"] == 256 * 512 * 2               # C once
    assert m["cycles"] == round(m["time_us"] * 1e-6 * 1.5e9)    # the CI chip's 1.5 GHz
    assert m["cpu_fallbacks"] == 0
    assert [k["name"] for k in j["kernels"]] == ["aten::mm"]
    # The roofline of the op's least traffic (A and B read once, C written once) at the
    # calibrated model's rate for that mix, (R + W) / bandwidth + turnaround x min(R, W):
    # 51.2 GB/s x 0.73 deliverable, 2 x 20 ns / (4 channels x 512 B) per byte; compute
    # at the CI chip's fp16 peak is shorter.
    k = j["kernels"][0]
    read, written = (256 * 128 + 128 * 512) * 2, 256 * 512 * 2
    assert k["min_dram_bytes"] == read + written
    bound = (read + written) / (51.2e9 * 0.73) + 2 * 20e-9 / (4 * 512) * min(read, written)
    assert 2 * m["macs"] / j["peak_flops_per_s_fp16"] < bound
    assert k["roofline_fraction"] == pytest.approx(bound / (k["time_ps"] * 1e-12), rel=1e-9)
    # (This kernel reads its panels before it stores C, so its channels turn around less
    # often than a streaming kernel's: it may sit slightly above the streaming roofline.)
    assert 0.9 < k["roofline_fraction"] < 1.1
    assert j["energy"]["total_j"] > 0


def test_same_run_gives_the_same_cycles():
    a = report("--workload", "softmax:64,1000", "--config", CI)
    b = report("--workload", "softmax:64,1000", "--config", CI)
    assert a["metrics"] == b["metrics"]


def test_golden_guard_passes_within_and_fails_beyond_tolerance(tmp_path):
    golden = tmp_path / "golden.json"
    base = ["run", "--workload", "add:1000000", "--config", CI, "--expect-json", str(golden)]
    assert spyre_sim(*base, "--update-golden").returncode == 0
    same = spyre_sim(*base, "--tolerance", "2%")
    assert same.returncode == 0, same.stderr
    assert "within tolerance" in same.stderr
    # Half the DRAM bandwidth: the add takes about twice the cycles.
    slower = spyre_sim(*base, "--tolerance", "2%", "--set", "memory.peak_gbps=102.4")
    assert slower.returncode == 1
    assert "cycles" in slower.stderr and "DRIFT" in slower.stderr and "REGRESSION" in slower.stderr
    # A change that moves nothing the guard watches passes.
    other = spyre_sim(*base, "--set", "energy.static_watts=30")
    assert other.returncode == 0, other.stderr


def test_diff_compares_metric_by_metric(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report("--workload", "add:100000", "--config", CI)))
    b.write_text(json.dumps(report("--workload", "add:100000", "--config", CI, "--set", "cores.count=2")))
    same = spyre_sim("diff", str(a), str(a))
    assert same.returncode == 0 and "time_us" in same.stdout
    d = spyre_sim("diff", str(a), str(b), "--tolerance", "1%")
    assert d.returncode == 1 and "DRIFT" in d.stdout


def test_bad_input_is_a_usage_error():
    r = spyre_sim("run", "--workload", "conv:3")
    assert r.returncode == 2 and "unknown workload 'conv'" in r.stderr and "gemm:M,N,K" in r.stderr
    r = spyre_sim("run", "--workload", "gemm:4,x,4")
    assert r.returncode == 2 and "gemm N: expected a positive integer, found 'x'" in r.stderr
    r = spyre_sim("run", "--workload", "add:10", "--set", "cores.count=-1")
    assert r.returncode == 2 and "cores.count" in r.stderr
    r = spyre_sim("run", "--workload", "gemm:64,64,64", "--set", "cores.scratchpad.usable_bytes=256B")
    assert r.returncode == 2 and "needs 896 bytes of scratchpad, the device has 256" in r.stderr


GRID = ["--grid", "cores.count=2,4", "--grid", "cores.scratchpad.usable_bytes=1638KiB,64KiB,256B"]


def sweep(out, *extra):
    return spyre_sim("sweep", "--workload", "gemm:128,256,128", "--config", CI, *GRID, "--jobs", "2",
                     "--out", str(out), *extra)


@pytest.mark.slow
def test_sweep_records_every_point_and_shards_merge_to_the_same_csv(tmp_path):
    full = sweep(tmp_path / "full")
    assert full.returncode == 1  # one grid column cannot compile: recorded, not fatal
    assert "ETA" in full.stderr
    points = sorted((tmp_path / "full").glob("p*.json"))
    assert len(points) == 6
    rows = list(csv.DictReader(open(tmp_path / "full" / "sweep.csv")))
    assert len(rows) == 6
    failed = [r for r in rows if r["status"] == "failed"]
    assert [r["cores.scratchpad.usable_bytes"] for r in failed] == ["256B", "256B"]
    assert all("needs 896 bytes of scratchpad" in r["error"] for r in failed)
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(float(r["cycles"]) > 0 for r in ok)

    again = sweep(tmp_path / "full")  # resumable: nothing left to run
    assert "0 to run, 6 already" in again.stderr

    for i in (1, 2):
        sweep(tmp_path / f"s{i}", "--shard", f"{i}/2")
    m = spyre_sim("sweep-merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "merged"))
    assert m.returncode == 0, m.stderr
    assert (tmp_path / "merged" / "sweep.csv").read_text() == (tmp_path / "full" / "sweep.csv").read_text()

    for args in (["sweep", str(tmp_path / "full"), "--x", "cores.count", "--y", "time_us",
                  "--series", "cores.scratchpad.usable_bytes", "--out", str(tmp_path / "curve")],
                 ["roofline", str(tmp_path / "full"), "--out", str(tmp_path / "roof")]):
        p = subprocess.run([str(REPO / "tools" / "plot"), *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    for stem in ("curve", "roof"):
        assert (tmp_path / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"{stem}.svg").exists()


def time_us(workload, config):
    # No data: the timed device's cycles without the host computing 4096^3 products.
    return report("--workload", workload, "--config", str(REPO / "configs" / config),
                  "--mode", "no-data")["metrics"]["time_us"]


@pytest.mark.slow
def test_what_ifs_make_physical_sense_on_the_default_chip():
    gemm, add = "gemm:4096,4096,4096,fp16", "add:67108864,fp16"
    base_gemm, base_add = time_us(gemm, "spyre.yaml"), time_us(add, "spyre.yaml")
    # Twice the DRAM bandwidth: the add is DRAM-bound, the big GEMM compute-bound.
    assert 1.6 <= base_add / time_us(add, "whatif-2x-dram.yaml") <= 2.0 + 1e-6
    assert base_gemm / time_us(gemm, "whatif-2x-dram.yaml") < 1.10
    # Half the cores: the GEMM loses compute, the add keeps its DRAM bandwidth.
    assert 1.4 <= time_us(gemm, "whatif-half-cores.yaml") / base_gemm <= 2.0
    assert time_us(add, "whatif-half-cores.yaml") / base_add < 1.2


def test_run_a_torchscript_model(tmp_path):
    import torch  # the environment has PyTorch (only this test needs it here)

    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 16))
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(model), str(path))
    j = report("--model", str(path), "--input", "8,64", "--config", CI)
    assert j["workload"] == f"model:{path}"
    assert j["metrics"]["macs"] == 8 * 64 * 96 + 8 * 96 * 16
    assert j["metrics"]["cpu_fallbacks"] == 0
    half = report("--model", str(path), "--input", "8,64:fp16", "--config", CI)
    assert half["metrics"]["macs"] == j["metrics"]["macs"]
    r = spyre_sim("run", "--model", str(tmp_path / "missing.pt"), "--input", "8,64")
    assert r.returncode == 2 and "not a TorchScript file" in r.stderr
    r = spyre_sim("run", "--model", str(path))
    assert r.returncode == 2 and "--model needs at least one --input" in r.stderr


def test_attention_and_transformer_block_workloads_run_on_the_device():
    j = report("--workload", "attention:2,64,4,32", "--config", CI)
    assert j["metrics"]["macs"] == 2 * 2 * 4 * 64 * 64 * 32  # q k^T and p v, exactly
    assert j["metrics"]["cpu_fallbacks"] == 0
    # One fused kernel: the scores never go through device memory.
    assert [k["name"] for k in j["kernels"]] == ["aten::_scaled_dot_product_fused_attention_overrideable"]
    k, tensor = j["kernels"][0], 2 * 4 * 64 * 32 * 2  # each of q, k, v and the output: 32 KiB of fp16
    assert 3 * tensor <= k["dram_read_bytes"] <= 3 * tensor + 4096  # (+ the causal positions)
    # The output's 64-byte rows (one head's) interleave with the other heads' in 128-byte
    # sticks, and a store pays whole sticks: twice the output, plus the fp32 logsumexp.
    assert k["dram_write_bytes"] == 2 * tensor + 2 * 4 * 64 * 4
    j = report("--workload", "block:64,128,4,256", "--config", CI)
    names = [k["name"] for k in j["kernels"]]
    assert j["metrics"]["cpu_fallbacks"] == 0
    assert names.count("aten::native_layer_norm") == 2 and names.count("aten::addmm") == 4
    # Projections (4 x 64 x 128 x 128 + 2 x 64 x 128 x 256 MACs) and attention (2 x 4 x 64^2 x 32).
    assert j["metrics"]["macs"] == 4 * 64 * 128 * 128 + 2 * 64 * 128 * 256 + 2 * 4 * 64 * 64 * 32
    r = spyre_sim("run", "--workload", "block:64,100,3", "--config", CI)
    assert r.returncode == 2 and "DIM 100 is not a multiple of HEADS 3" in r.stderr


def test_outputs_that_cannot_be_written_fail_before_the_run(tmp_path):
    r = spyre_sim("run", "--workload", "add:1000", "--config", CI, "--trace", "/nonexistent-dir/t.json")
    assert r.returncode == 2 and "--trace: cannot write /nonexistent-dir/t.json" in r.stderr
    r = spyre_sim("run", "--workload", "add:1000", "--config", CI, "--expect-json", "/nonexistent-dir/g.json",
                  "--update-golden")
    assert r.returncode == 2 and "--expect-json: cannot write" in r.stderr
    # And a writable one really is written.
    golden = tmp_path / "g.json"
    r = spyre_sim("run", "--workload", "add:1000", "--config", CI, "--expect-json", str(golden), "--update-golden")
    assert r.returncode == 0 and json.loads(golden.read_text())["metrics"]["cycles"] > 0


def test_exit_codes_follow_the_kind_of_failure(tmp_path):
    # diff of two files that are not reports: a usage error, not "within tolerance".
    empty = tmp_path / "e.json"
    empty.write_text("{}")
    r = spyre_sim("diff", str(empty), str(empty))
    assert r.returncode == 2 and "expected a spyre-sim run --json report" in r.stderr
    # A folder the tool cannot create is the user's path, not a bug.
    r = spyre_sim("sweep", "--workload", "add:100", "--grid", "cores.count=1", "--out", "/proc/x")
    assert r.returncode == 2, r.stderr
    # sweep-merge of a missing folder says so and creates nothing.
    missing = tmp_path / "missing"
    r = spyre_sim("sweep-merge", str(missing))
    assert r.returncode == 2 and "no such folder" in r.stderr and not missing.exists()
    # A config name that is not UTF-8 is a config error naming the place.
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(pathlib.Path(CI).read_bytes().replace(b"name: ", b"name: \xff", 1))
    r = subprocess.run(["spyre-sim", "info", "--config", str(bad)], capture_output=True, timeout=60)
    assert r.returncode == 2 and b"expected UTF-8 text, found the byte 0xff" in r.stderr
    # Device memory running out is exit 5 (it said "fault" and exited 3 before).
    r = spyre_sim("run", "--workload", "add:100000000", "--config", CI, "--set", "memory.capacity_bytes=64MiB",
                  "--set", "memory.usable_bytes=64MiB")
    assert r.returncode == 5 and "out of memory" in r.stderr, r.stderr


def test_a_set_value_with_a_semicolon_means_the_same_to_info_and_run():
    # The value is one YAML string; the driver must not split it into two overrides.
    info = spyre_sim("info", "--json", "--config", CI, "--set", "name=a;cores.count=2")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["config"]["resolved"]["name"] == "a;cores.count=2"
    run = report("--workload", "add:1000", "--config", CI, "--set", "name=a;cores.count=2")
    assert run["config"]["resolved"]["name"] == "a;cores.count=2"
    assert run["config"]["resolved"]["cores"]["count"] == json.loads(info.stdout)["config"]["resolved"]["cores"]["count"]


def test_sweep_folders_belong_to_one_sweep_and_damaged_points_are_rerun(tmp_path):
    out = tmp_path / "s"
    first = spyre_sim("sweep", "--workload", "add:1000", "--config", CI, "--grid", "cores.count=1,2", "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert json.loads((out / "sweep.json").read_text())["workload"] == "add:1000"
    # Another workload or grid into the same folder: refused, the old rows stay untouched.
    csv_before = (out / "sweep.csv").read_text()
    other = spyre_sim("sweep", "--workload", "add:2000", "--config", CI, "--grid", "cores.count=1,2", "--out", str(out))
    assert other.returncode == 2 and "holds another sweep" in other.stderr
    assert (out / "sweep.csv").read_text() == csv_before
    # A truncated point file is run again, not silently dropped.
    p1 = out / "p0001.json"
    p1.write_text(p1.read_text()[:40])
    again = spyre_sim("sweep", "--workload", "add:1000", "--config", CI, "--grid", "cores.count=1,2", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "p0001.json: not valid JSON" in again.stderr and "1 to run, 1 already" in again.stderr
    assert json.loads(p1.read_text())["status"] == "ok"
    assert len(list(csv.DictReader(open(out / "sweep.csv")))) == 2
    assert not list(out.glob("*.tmp"))


@pytest.mark.slow
def test_a_stopped_sweep_waits_for_its_points_and_resumes(tmp_path):
    import signal
    import time
    out = tmp_path / "s"
    args = ["spyre-sim", "sweep", "--workload", "gemm:512,512,512", "--config", CI,
            "--grid", "cores.count=1,2,3,4,5,6", "--jobs", "2", "--out", str(out)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not list(out.glob("p*.log")):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "rerun the same command to resume" in err
    # No child is left running, and every point file is whole.
    ps = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert ps.stdout.strip() == ""
    for f in out.glob("p*.json"):
        assert json.loads(f.read_text())["status"] in ("ok", "failed")
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert len(list(csv.DictReader(open(out / "sweep.csv")))) == 6


def test_a_report_from_kernel_totals_matches_one_from_every_launch_record():
    # Long runs keep only the latest launch records; the report then comes from exact
    # per-kernel totals and must give the same metrics.
    import os
    args = ["run", "--workload", "block:64,256,4,512", "--config", CI, "--json"]
    full = json.loads(spyre_sim(*args).stdout)
    env = dict(os.environ, SPYRE_SIM_LAUNCH_RECORDS="2")
    r = subprocess.run(["spyre-sim", *args], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    few = json.loads(r.stdout)
    for key in ("time_us", "cycles", "kernels", "macs", "dram_read_bytes", "dram_write_bytes", "ring_link_bytes"):
        assert few["metrics"][key] == pytest.approx(full["metrics"][key], rel=1e-9), key
    assert sum(k["launches"] for k in few["kernels"]) == full["metrics"]["kernels"]


def test_calibrate_prints_rows_as_json_and_refuses_an_empty_selection():
    r = spyre_sim("calibrate", "--json", "--only", "fill_")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    [row] = j["rows"]
    # A write-only fill of 64 Mi fp16 on the default chip: 204.8 GB/s x 0.73 = 149.5 GB/s.
    assert row["model"] == pytest.approx(149.5, rel=0.01) and row["reference"] == 150 and row["pass"]
    r = spyre_sim("calibrate", "--only", "no such row")
    assert r.returncode == 2 and "no calibration row left" in r.stderr


def test_no_data_mode_gives_the_timed_cycles_and_traffic():
    # Workloads whose addresses do not depend on values: an MLP, an attention layer, a
    # transformer block and an LLM's prefill (gen=1: the prefill's token only).
    for workload in ("mlp:64,256,512,256", "attention:1,128,4,64", "block:64,128,4,256",
                     "llm:layers=2,dim=128,heads=4,kv_heads=2,ffn=256,vocab=512,prompt=32,gen=1"):
        timed = report("--workload", workload, "--config", CI)["metrics"]
        no_data = report("--workload", workload, "--config", CI, "--mode", "no-data")["metrics"]
        for metric in ("cycles", "kernels", "dram_read_bytes", "dram_write_bytes", "ring_link_bytes", "macs"):
            assert no_data[metric] == timed[metric], (workload, metric)


LLM = "llm:layers=2,dim=128,heads=4,kv_heads=2,ffn=256,vocab=512,prompt=24,gen=6"


def test_llm_generates_the_cpus_tokens_and_reports_each_phase():
    for extra in (",dtype=fp32,check=cpu", ",dtype=fp32,batch=3,check=cpu"):
        j = report("--workload", LLM + extra, "--config", CI)
        g, m = j["llm"], j["metrics"]
        assert m["cpu_fallbacks"] == 0
        # fp32: greedy tokens equal the CPU's, for every sequence of the batch (batch 3:
        # prompts of 24, 20 and 16 tokens, left-padded and masked).
        assert g["cpu_check"]["equal"] == g["cpu_check"]["tokens"] > 0
        assert g["decode_steps"] == 5
        assert 0 < g["prefill_bound_us"] < g["ttft_us"] < m["time_us"]
        assert 0 < g["decode_bound_us_per_token"] < g["decode_us_per_token"]
        # The time to first token is the prefill's alone (the same workload with gen=1), to
        # 1%: after a longer warm-up the allocator hands out other addresses, so DRAM
        # channels collide differently (batch 3: 0.3%); one decode step is far more than 1%.
        prefill = report("--workload", LLM.replace("gen=6", "gen=1") + extra, "--config", CI)["metrics"]
        assert g["ttft_us"] == pytest.approx(prefill["time_us"], rel=0.01)
        batch = 3 if "batch=3" in extra else 1
        assert g["decode_tokens_per_s"] == pytest.approx(batch * 1e6 / g["decode_us_per_token"])
    assert g["prompt_lengths"] == [24, 20, 16]
    text = spyre_sim("run", "--workload", LLM, "--config", CI)
    assert text.returncode == 0, text.stderr
    assert "time to first token" in text.stdout and "tokens/s" in text.stdout
    for bad, message in (("llm:layers=0", "llm layers: expected a positive integer"),
                         ("llm:dim=100,heads=3", "dim 100 is not a multiple of heads 3"),
                         ("llm:heads=8,kv_heads=3", "heads 8 is not a multiple of kv_heads 3"),
                         ("llm:colour=red", "unknown key 'colour'"),
                         ("llm:kv=pages", "llm kv: expected 'paged' or 'contiguous', found 'pages'"),
                         ("llm:block=16", "block= sizes the pages of a paged cache; add kv=paged")):
        r = spyre_sim("run", "--workload", bad, "--config", CI)
        assert r.returncode == 2 and message in r.stderr, (bad, r.stderr)


def test_a_paged_kv_cache_generates_the_tokens_of_the_contiguous_one():
    # Pages of 8 tokens, each sequence's pages interleaved with the others' in the pool:
    # decode steps attend through the slot table (spyre::paged_attention). fp32: the
    # tokens are the CPU's, and the contiguous cache's; one attention kernel per layer
    # and step either way, so the launches match.
    for batch in (1, 3):
        extra = f",dtype=fp32,batch={batch},check=cpu"
        paged = report("--workload", LLM + extra + ",kv=paged,block=8", "--config", CI)
        flat = report("--workload", LLM + extra, "--config", CI)
        assert paged["llm"]["spec"].endswith(",kv=paged,block=8")
        assert paged["metrics"]["cpu_fallbacks"] == 0
        assert paged["llm"]["cpu_check"]["equal"] == paged["llm"]["cpu_check"]["tokens"] == 6 * batch
        assert paged["metrics"]["kernels"] == flat["metrics"]["kernels"]
        # The same bytes of K and V move (a gather of each key's row instead of a strided
        # load), so a decode step costs about the same.
        assert paged["llm"]["decode_us_per_token"] == pytest.approx(flat["llm"]["decode_us_per_token"], rel=0.1)


TP_LLM = "llm:layers=2,dim=256,heads=8,kv_heads=4,ffn=512,vocab=512,prompt=24,gen=6,dtype=fp32"


@pytest.mark.slow
def test_tensor_parallel_llm_generates_the_cpus_tokens_over_2_and_4_cards(tmp_path):
    single = report("--workload", TP_LLM + ",check=cpu", "--config", CI)
    assert "tensor_parallel" not in single["llm"]
    for cards in (2, 4):
        trace = tmp_path / "tp.json"
        j = report("--workload", TP_LLM + f",check=cpu,tp={cards}", "--config", CI, "--trace", str(trace))
        g, m = j["llm"], j["metrics"]
        assert g["spec"].endswith(f",tp={cards}") and m["cpu_fallbacks"] == 0
        # fp32: the cards' partial sums added by the ring give the CPU's greedy tokens.
        assert g["cpu_check"]["equal"] == g["cpu_check"]["tokens"] == 6
        t = g["tensor_parallel"]
        assert t["cards"] == cards and len(t["per_card"]) == cards
        # Every card sends 2 (N - 1) / N of each all-reduced tensor: two per layer per
        # forward of [tokens, 256] fp32, the prefill's 24 tokens and 5 decode steps' 1:
        #   2 layers x 2 x 2 (N - 1) / N x (24 + 5) x 256 x 4 bytes;
        # and passes on N - 1 cards' best tokens (a logit and a token, 2 x 4 bytes) per
        # forward of the vocab-parallel output projection: 6 x (N - 1) x 8 bytes.
        sent = 2 * 2 * 2 * (cards - 1) / cards * 29 * 256 * 4 + 6 * (cards - 1) * 8
        for c in t["per_card"]:
            assert c["peer_sent_bytes"] == c["peer_received_bytes"] == sent
            assert c["compute_us"] > 0 and c["communication_us"] > 0
            assert 0 <= c["overlap_us"] <= min(c["compute_us"], c["communication_us"])
            busy = c["compute_us"] + c["communication_us"] - c["overlap_us"]
            assert busy <= m["time_us"] * 1.0001
            assert c["idle_us"] == pytest.approx(m["time_us"] - busy, abs=1e-6)
        assert 0 < t["communication_share"] < 1
        # Each card holds 1/N of the layers' weights, the cache and the output projection
        # (the embeddings whole), so its decode bound falls.
        assert g["decode_bound_us_per_token"] < single["llm"]["decode_bound_us_per_token"]
        assert g["weight_bytes"] < single["llm"]["weight_bytes"]
        # Every card is traced: card 0 to the file given, card r beside it.
        for r in range(cards):
            path = trace if r == 0 else tmp_path / f"tp.card{r}.json"
            events = json.loads(path.read_text())
            events = events["traceEvents"] if isinstance(events, dict) else events
            assert any(e.get("name", "").endswith(f"spyre:{(r + 1) % cards}") for e in events), r
    # The cards are driven as by a host process each (host.threads=per_card, which the
    # workload sets): with one host thread for all four, each card waits for the host's
    # calls for the others, and the same generation takes longer. Deterministic.
    per_card = report("--workload", TP_LLM + ",tp=4", "--config", CI)["metrics"]
    one_host = report("--workload", TP_LLM + ",tp=4", "--config", CI, "--set", "host.threads=one")["metrics"]
    assert one_host["time_us"] > 1.5 * per_card["time_us"]
    assert report("--workload", TP_LLM + ",tp=4", "--config", CI)["metrics"]["cycles"] == per_card["cycles"]
    text = spyre_sim("run", "--workload", TP_LLM + ",tp=2", "--config", CI)
    assert text.returncode == 0, text.stderr
    assert "tensor parallel      2 cards" in text.stdout and "communicate us" in text.stdout
    r = spyre_sim("run", "--workload", TP_LLM + ",tp=3", "--config", CI)
    assert r.returncode == 2 and "tp=3 cards must split heads 8 evenly" in r.stderr, r.stderr
    r = spyre_sim("run", "--workload", TP_LLM.replace("vocab=512", "vocab=510") + ",tp=4", "--config", CI)
    assert r.returncode == 2 and "tp=4 cards must split vocab 510 evenly" in r.stderr, r.stderr
    # Batch 3 (prompts of 24, 20 and 16 tokens): every sequence's tokens are the CPU's.
    g = report("--workload", TP_LLM + ",check=cpu,batch=3,tp=2", "--config", CI)["llm"]
    assert g["cpu_check"]["equal"] == g["cpu_check"]["tokens"] == 18


def torchvision_macs(name, resolution):
    """The multiply-accumulates of torchvision's own model at a resolution, batch 1,
    counted on the CPU: every Conv2d and Linear by forward hooks, and for vit_b_16 the
    attention that nn.MultiheadAttention computes without calling its modules."""
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(**({"image_size": resolution} if name == "vit_b_16" else {})).eval()
    macs = []

    def hook(module, inputs, out):
        if isinstance(module, torch.nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1]
            macs.append(out.numel() * module.in_channels // module.groups * k)
        else:
            macs.append(out.numel() * module.in_features)

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(1, 3, resolution, resolution))
    total = sum(macs)
    if name == "vit_b_16":
        t, d = (resolution // 16) ** 2 + 1, 768
        total += 12 * (t * d * 3 * d + t * d * d + 2 * t * t * d)  # Q/K/V and out projections, QK^T and PV
    return total


@pytest.mark.slow
@pytest.mark.parametrize("name,resolution", [("resnet18", 64), ("resnet50", 64), ("mobilenet_v3_small", 64),
                                             ("vit_b_16", 32)])
def test_vision_workloads_are_torchvisions_architectures_reported_per_layer(name, resolution):
    j = report("--workload", f"{name}:1,{resolution}", "--config", CI, "--mode", "no-data")
    m = j["metrics"]
    assert m["cpu_fallbacks"] == 0
    assert m["macs"] == torchvision_macs(name, resolution)  # the same layers and shapes as torchvision's
    layers = j["vision"]["layers"]
    assert layers[0]["name"] in ("stem", "patch_embed") and layers[-1]["name"] == "head"
    # The rows partition the run: their kernels, MACs and traffic add up to the totals.
    assert sum(r["kernels"] for r in layers) == m["kernels"]
    assert sum(r["macs"] for r in layers) == m["macs"]
    assert sum(r["dram_bytes"] for r in layers) == m["dram_read_bytes"] + m["dram_write_bytes"]
    assert sum(r["time_us"] for r in layers) == pytest.approx(m["time_us"], rel=1e-9)
    assert m["images_per_s"] == pytest.approx(1 / (m["time_us"] * 1e-6))


@pytest.mark.slow
def test_a_training_step_workload_runs_forward_backward_and_sgd_on_the_device():
    j = report("--workload", "train:resnet18,2,32,fp32", "--config", CI, "--mode", "no-data")
    names = [r["name"] for r in j["vision"]["layers"]]
    assert names[-3:] == ["head", "loss and backward", "sgd step"]
    assert j["metrics"]["cpu_fallbacks"] == 0
    rows = {r["name"]: r for r in j["vision"]["layers"]}
    forward = sum(r["macs"] for r in j["vision"]["layers"][:-2])
    assert forward == 2 * torchvision_macs("resnet18", 32)
    # The backward computes each convolution's input and weight gradients, twice the
    # forward's MACs less the stem's input gradient (not needed), plus the zeros a
    # strided convolution's input gradient multiplies: it convolves the gradient with
    # stride - 1 zeros between its values (here 2.25x the forward's MACs).
    assert 2 * forward < rows["loss and backward"]["macs"] < 2.5 * forward
    assert rows["sgd step"]["macs"] == 0 and rows["sgd step"]["kernels"] > 0
    text = spyre_sim("run", "--workload", "train:resnet18,2,32", "--config", CI, "--mode", "no-data").stdout
    assert "loss and backward" in text and "images/s" in text
    for bad, message in (("train:alexnet", "unknown model 'alexnet'"), ("vit_b_16:1,100", "not a multiple of 16"),
                         ("resnet18:1,224,fp16,9", "at most BATCH,RES,dtype"), ("train", "name the model")):
        r = spyre_sim("run", "--workload", bad, "--config", CI)
        assert r.returncode == 2 and message in r.stderr, (bad, r.stderr)
