"""The project's device-generic test classes, instantiated for spyre by PyTorch's own
machinery (torch.testing._internal.common_device_type), each comparing with the CPU.

Run just these: tools/dev run python3 -m pytest tests/python/test_device_generic.py
(ctest runs them with the rest of tests/python).
"""

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
              torch.int32, torch.int64, torch.bool, torch.complex64)


def reference(dtype, shape=(4, 6)):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.complex64 if dtype.is_complex else torch.float32).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


class TestSpyreCreation(TestCase):
    @dtypes(*ALL_DTYPES)
    def test_empty_zeros_ones_full(self, device, dtype):
        self.assertEqual(torch.empty(3, 4, device=device, dtype=dtype).shape, (3, 4))
        self.assertEqual(torch.zeros(3, 4, device=device, dtype=dtype).cpu(), torch.zeros(3, 4, dtype=dtype))
        self.assertEqual(torch.ones(5, device=device, dtype=dtype).cpu(), torch.ones(5, dtype=dtype))
        self.assertEqual(torch.full((2, 2), 1, device=device, dtype=dtype).cpu(), torch.full((2, 2), 1, dtype=dtype))

    def test_tensor_from_data_and_like(self, device):
        t = torch.tensor([[1.5, 2.5], [3.5, 4.5]], device=device)
        self.assertEqual(t.cpu(), torch.tensor([[1.5, 2.5], [3.5, 4.5]]))
        self.assertEqual(torch.zeros_like(t).device, t.device)
        self.assertEqual(torch.empty_like(t).shape, t.shape)


class TestSpyreCopies(TestCase):
    @dtypes(*ALL_DTYPES)
    def test_dtype_round_trip(self, device, dtype):
        x = reference(dtype)
        self.assertEqual(x.to(device).cpu(), x, exact_dtype=True, atol=0, rtol=0)

    @dtypes(torch.float32, torch.int32, torch.float16)
    def test_copy_between_dtypes_on_device(self, device, dtype):
        x = reference(torch.float32)
        self.assertEqual(x.to(device).to(dtype).cpu(), x.to(dtype))

    def test_copy_into_strided_destination(self, device):
        x = torch.zeros(5, 5, device=device)
        x.t()[1:3].copy_(torch.ones(2, 5))
        expect = torch.zeros(5, 5)
        expect.t()[1:3].copy_(torch.ones(2, 5))
        self.assertEqual(x.cpu(), expect)


class TestSpyreViews(TestCase):
    def test_views_alias_their_base(self, device):
        base = torch.arange(24.0, device=device).reshape(2, 3, 4)
        for view in (base.view(6, 4), base.transpose(0, 2), base[:, 1], base.narrow(2, 1, 2), base.unflatten(2, (2, 2))):
            self.assertEqual(view.untyped_storage().data_ptr(), base.untyped_storage().data_ptr())
        base.view(-1)[0] = 100.0
        self.assertEqual(base[0, 0, 0].item(), 100.0)

    def test_views_read_like_cpu(self, device):
        cpu = torch.arange(24.0).reshape(2, 3, 4)
        dev = cpu.to(device)
        for f in (lambda t: t.transpose(0, 2), lambda t: t[:, ::2, 1:], lambda t: t.permute(2, 0, 1),
                  lambda t: t.expand(3, 2, 3, 4), lambda t: t.diagonal(dim1=1, dim2=2)):
            self.assertEqual(f(dev).cpu(), f(cpu))


instantiate_device_type_tests(TestSpyreCreation, globals(), only_for=["spyre"])  # a list: a plain string is matched by substring
instantiate_device_type_tests(TestSpyreCopies, globals(), only_for=["spyre"])  # a list: a plain string is matched by substring
instantiate_device_type_tests(TestSpyreViews, globals(), only_for=["spyre"])  # a list: a plain string is matched by substring
