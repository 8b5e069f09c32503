"""spyre_sim.configure: the devices come from the driver's configure call (the ABI's
spyreDriverConfigure), not only from the environment. Each case runs in a fresh
process: the devices of this test process have started already."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(code: str, **env_changes) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for key in ("SPYRE_SIM_CONFIG", "SPYRE_SIM_SET", "SPYRE_SIM_DEVICES", "SPYRE_SIM_MODE"):
        env.pop(key, None)
    env.update(env_changes)
    env["PYTHONPATH"] = str(REPO / "python")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


PROGRAM = """
import spyre_sim, torch
spyre_sim.configure({args})
a = torch.randn(64, 96); b = torch.randn(96, 80)
c = (a.to("spyre") @ b.to("spyre")).cpu()
torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-2)
r = torch.spyre.report()
print(torch.spyre.device_count(), len(r["cores"]), r["elapsed_ps"] > 0, r["macs"]["fp32"] > 0)
"""


def test_yaml_text_overrides_devices_and_mode_reach_the_driver():
    yaml = (REPO / "configs" / "spyre-ci.yaml").read_text()
    out = run(PROGRAM.format(args=f"yaml={yaml!r}, overrides=['cores.count=3'], devices=2, mode='functional'"))
    assert out.returncode == 0, out.stderr
    # Two devices of three cores; functional: no device time passes.
    assert out.stdout.split() == ["2", "3", "False", "True"]


def test_a_config_file_and_the_timed_mode():
    out = run(PROGRAM.format(args=f"{str(REPO / 'configs' / 'spyre-ci.yaml')!r}, mode='timed'"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "4", "True", "True"]


def test_the_environment_stays_the_default():
    out = run(PROGRAM.format(args=""), SPYRE_SIM_CONFIG=str(REPO / "configs" / "spyre-ci.yaml"), SPYRE_SIM_DEVICES="3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "4", "True", "True"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        ("mode='fast'", "mode must be 'timed', 'functional' or 'no-data', not 'fast'"),
        ("overrides=['cores.count=0']", "cores.count"),
        ("config='/nonexistent.yaml'", "/nonexistent.yaml"),
        ("config='x.yaml', yaml='name: x'", "give config or yaml, not both"),
    ],
)
def test_bad_configurations_are_refused_with_the_reason(args, message):
    out = run(f"import spyre_sim\nspyre_sim.configure({args})")
    assert out.returncode != 0
    assert message in out.stderr


def test_configure_after_the_devices_started_is_refused():
    code = "import spyre_sim, torch\ntorch.zeros(1, device='spyre')\nspyre_sim.configure(mode='functional')"
    out = run(code, SPYRE_SIM_CONFIG=str(REPO / "configs" / "spyre-ci.yaml"))
    assert out.returncode != 0
    assert "the driver is running" in out.stderr
