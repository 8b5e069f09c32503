"""Shared setup for the CLI's tests."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the edit loop (tools/dev check); tools/dev test runs it")
