"""Shared setup for the backend's Python tests: the backend is loaded once."""

import pytest
import torch

import spyre_sim  # noqa: F401  (registers the spyre device and torch.spyre)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the edit loop (tools/dev check); tools/dev test runs it")


@pytest.fixture
def sync():
    """Synchronize the device after a test's work (surfaces faults in the test)."""
    yield
    torch.spyre.synchronize()


def pytest_terminal_summary(terminalreporter):
    """The OpInfo run's accounting: samples run and skipped per op (test_opinfo.py)."""
    import sys

    module = sys.modules.get("test_opinfo")
    if module is None or not module.STATS:
        return
    terminalreporter.section("OpInfo samples on spyre (run / skipped / run with a CPU fallback)")
    for name, (run, skipped, fell_back) in sorted(module.STATS.items()):
        terminalreporter.write_line(f"{name:<36} {run:6d} run {skipped:5d} skipped {fell_back:5d} with a fallback")
