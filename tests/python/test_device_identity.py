"""Loading the backend registers "spyre" as PyTorch's PrivateUse1 device."""

import torch

import spyre_sim  # noqa: F401  (loads libspyre_torch.so)


def test_device_strings_parse_as_spyre():
    device = torch.device("spyre:1")
    assert device.type == "spyre"
    assert device.index == 1
    assert str(torch.device("spyre")) == "spyre"


def test_privateuse1_backend_is_named_spyre():
    assert torch._C._get_privateuse1_backend_name() == "spyre"
