"""Shared setup for the backend's Python tests: the backend is loaded once."""

import pytest
import torch

import spyre_sim  # noqa: F401  (registers the spyre device and torch.spyre)


@pytest.fixture
def sync():
    """Synchronize the device after a test's work (surfaces faults in the test)."""
    yield
    torch.spyre.synchronize()
