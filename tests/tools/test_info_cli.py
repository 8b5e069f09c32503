"""spyre-sim info: the chip summary, its JSON form, and errors on bad configs."""

import json
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run(["spyre-sim", *args], capture_output=True, text=True, timeout=60)


def info_json(*args):
    result = run("info", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_default_chip_matches_public_figures():
    info = info_json()
    derived = info["derived"]
    # docs/ARCHITECTURE.md §3: ~98 TFLOPS fp16, ~204 GB/s LPDDR5; within 10%.
    assert derived["peak_ops_per_s"]["fp16"] == pytest.approx(98e12, rel=0.10)
    assert derived["dram_peak_bytes_per_s"] == pytest.approx(204e9, rel=0.10)
    assert info["config"]["source"] == "<embedded spyre.yaml>"
    assert info["config"]["resolved"]["cores"]["count"] == 32
    assert info["schema_version"] == 1
    assert len(info["config"]["hash"]) == 16


def test_text_summary_names_the_key_figures():
    result = run("info")
    assert result.returncode == 0, result.stderr
    for needle in ("chip 'spyre'", "fp16", "98.30", "204.8 GB/s peak", "roofline ridge", "480.0"):
        assert needle in result.stdout


def test_overrides_change_the_figures_and_the_hash():
    base = info_json()
    half = info_json("--set", "cores.count=16", "--set", "memory.peak_gbps=102.4")
    assert half["derived"]["peak_ops_per_s"]["fp16"] == pytest.approx(base["derived"]["peak_ops_per_s"]["fp16"] / 2)
    assert half["derived"]["dram_peak_bytes_per_s"] == pytest.approx(102.4e9)
    assert half["config"]["hash"] != base["config"]["hash"]
    assert half["config"]["overrides"] == ["cores.count=16", "memory.peak_gbps=102.4"]


def test_ci_config_file_loads():
    info = info_json("--config", str(REPO / "configs" / "spyre-ci.yaml"))
    assert info["config"]["name"] == "spyre-ci"


def bad_config(tmp_path, old, new):
    text = (REPO / "configs" / "spyre.yaml").read_text()
    assert old in text
    text = text.replace(old, new, 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = text[: text.index(new)].count("\n") + 1
    return path, line


@pytest.mark.parametrize(
    "old,new,key",
    [
        ("  corelets: 2", "  corlets: 2", "cores.corlets"),  # misspelled key
        ("bytes: 2 MiB", "bytes: -2 MiB", "cores.scratchpad.bytes"),  # negative size
        ("  count: 32", "  count: lots", "cores.count"),  # wrong type
    ],
)
def test_bad_config_exits_nonzero_with_one_line_naming_file_line_and_key(tmp_path, old, new, key):
    path, line = bad_config(tmp_path, old, new)
    result = run("info", "--config", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{path}:{line}:" in lines[0]
    assert key in lines[0]
    assert result.stdout == ""


def test_bad_override_names_the_override():
    result = run("info", "--set", "memory.peak_gbps=fast")
    assert result.returncode == 2
    assert "--set memory.peak_gbps=fast" in result.stderr
    assert "memory.peak_gbps" in result.stderr


def test_missing_config_file_is_a_clear_error():
    result = run("info", "--config", "/nonexistent.yaml")
    assert result.returncode == 2
    assert "/nonexistent.yaml" in result.stderr and "cannot open" in result.stderr


def test_unknown_subcommand_is_a_usage_error():
    assert run("frobnicate").returncode == 2
