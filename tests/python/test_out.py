"""out= rules, checked against the CPU: where the CPU refuses an out tensor (wrong device
or an unsafe cast), spyre refuses too; where it accepts, spyre gives the same values."""

import pytest
import torch

A = torch.randn(4, 4)
V = torch.randn(4)
I = torch.tensor([0, 2])
B3 = torch.randn(2, 4, 4)

CASES = {
    "mm": lambda out, d: torch.mm(A.to(d), A.to(d), out=out),
    "bmm": lambda out, d: torch.bmm(B3.to(d), B3.to(d), out=out),
    "addmm": lambda out, d: torch.addmm(A.to(d), A.to(d), A.to(d), out=out),
    "mean": lambda out, d: torch.mean(A.to(d), 0, out=out),
    "sum": lambda out, d: torch.sum(A.to(d), 0, out=out),
    "amax": lambda out, d: torch.amax(A.to(d), 0, out=out),
    "any": lambda out, d: torch.any(A.to(d) > 0, 0, out=out),
    "all": lambda out, d: torch.all(A.to(d) > 0, 0, out=out),
    "cat": lambda out, d: torch.cat([A.to(d), A.to(d)], out=out),
    "index_select": lambda out, d: torch.index_select(A.to(d), 0, I.to(d), out=out),
    "tril": lambda out, d: torch.tril(A.to(d), out=out),
    "clamp": lambda out, d: torch.clamp(A.to(d), -0.5, 0.5, out=out),
    "where": lambda out, d: torch.where(A.to(d) > 0, A.to(d), V.to(d), out=out),
    "softmax": lambda out, d: torch._softmax(A.to(d), 1, False, out=out),
}
OUT_DTYPES = [torch.float32, torch.float16, torch.int64, torch.bool]


def outcome(fn, out, device):
    try:
        return fn(out, device).cpu()
    except (RuntimeError, TypeError) as e:
        return e


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", OUT_DTYPES, ids=str)
def test_out_dtype_rules_match_the_cpu(name, dtype):
    fn = CASES[name]
    cpu = outcome(fn, torch.empty(0, dtype=dtype), "cpu")
    dev = outcome(fn, torch.empty(0, dtype=dtype, device="spyre"), "spyre")
    if isinstance(cpu, Exception):
        assert isinstance(dev, Exception), f"{name} into {dtype}: the CPU refuses ({cpu}), spyre accepted"
    else:
        assert not isinstance(dev, Exception), f"{name} into {dtype}: spyre refused: {dev}"
        assert dev.dtype == cpu.dtype
        torch.testing.assert_close(dev, cpu, rtol=2e-3, atol=2e-3, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cpu_out_with_spyre_inputs_is_refused(name):
    # mm, bmm, addmm, mean, amax, any, cat, index_select, tril, ... accepted it before.
    dtype = torch.bool if name in ("any", "all") else torch.float32
    with pytest.raises(RuntimeError, match="[Dd]evice|device"):
        CASES[name](torch.empty(0, dtype=dtype), "spyre")


def test_cat_keeps_channels_last():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    y = torch.cat([x.to("spyre"), x.to("spyre")], dim=1)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert y.stride() == torch.cat([x, x], dim=1).stride()
    assert torch.equal(y.cpu(), torch.cat([x, x], dim=1))
