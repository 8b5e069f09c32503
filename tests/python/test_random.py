"""Random numbers on spyre: the device generator (a Philox4x32-10 stream position),
torch.Generator(device="spyre"), torch.spyre's seeding and state API, and the random
ops that draw on the device (rand, randn, uniform_, normal_, bernoulli, dropout)."""

import os
import pathlib
import struct
import subprocess
import sys

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]

# -- an independent Philox4x32-10, from the paper (Salmon et al., SC'11) --------------
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox(counter, key):
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


def uniform_reference(seed, offset, n):
    """Number j: lane j % 4 of counter offset + j // 4, its top 24 bits over 2^24."""
    out = []
    for j in range(n):
        counter = offset + j // 4
        lanes = philox((counter & MASK, counter >> 32, 0, 0), (seed & MASK, seed >> 32))
        out.append((lanes[j % 4] >> 8) / 2.0**24)
    return torch.tensor(out)


def state(seed, offset):
    return torch.tensor(list(struct.pack("<QQ", seed, offset)), dtype=torch.uint8)


def test_the_reference_matches_the_published_known_answer():
    assert philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


def test_rand_is_the_philox_stream_of_the_generator_state():
    torch.spyre.set_rng_state(state(0x1234_5678_9ABC, 40))
    got = torch.rand(37, device="spyre").cpu()
    torch.testing.assert_close(got, uniform_reference(0x1234_5678_9ABC, 40, 37), rtol=0, atol=0)
    # 37 uniform numbers take ceil(37 / 4) = 10 counters.
    assert struct.unpack("<QQ", bytes(torch.spyre.get_rng_state().tolist())) == (0x1234_5678_9ABC, 50)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(1000, device="spyre"),
    lambda: torch.rand(3, 5, 7, device="spyre", dtype=torch.float16),
    lambda: torch.nn.functional.dropout(torch.ones(4096, device="spyre"), 0.3, training=True),
    lambda: torch.empty(500, device="spyre", dtype=torch.bfloat16).normal_(2, 3),
    lambda: torch.bernoulli(torch.full((300,), 0.4, device="spyre")),
])
def test_a_seed_makes_device_random_ops_reproducible(make):
    torch.spyre.manual_seed(7)
    a = make().cpu()
    b = make().cpu()
    torch.spyre.manual_seed(7)
    assert torch.equal(make().cpu(), a)
    assert not torch.equal(a, b)  # the stream moved on


def test_torch_manual_seed_seeds_spyre_and_spyre_leaves_the_cpu_generator_alone():
    torch.manual_seed(11)
    a = torch.randn(64, device="spyre").cpu()
    torch.manual_seed(11)
    cpu_state = torch.get_rng_state()
    torch.rand(100)  # the CPU's generator moves; spyre's does not care
    torch.manual_seed(11)
    torch.rand(100)
    b = torch.randn(64, device="spyre").cpu()
    assert torch.equal(a, b)
    torch.set_rng_state(cpu_state)
    torch.randn(64, device="spyre")
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_a_spyre_generator_object_draws_its_own_stream_and_restores_its_state():
    g = torch.Generator(device="spyre")
    assert g.device == torch.device("spyre", 0)
    g.manual_seed(3)
    assert g.initial_seed() == 3
    x = torch.rand(5, generator=g, device="spyre").cpu()
    saved = g.get_state()
    y = torch.rand(5, generator=g, device="spyre").cpu()
    g.set_state(saved)
    assert torch.equal(torch.rand(5, generator=g, device="spyre").cpu(), y)
    torch.testing.assert_close(x, uniform_reference(3, 0, 5), rtol=0, atol=0)
    # The default generator was not used.
    torch.spyre.manual_seed(3)
    assert torch.equal(torch.rand(5, device="spyre").cpu(), x)


def test_the_state_api_round_trips_and_rejects_a_malformed_state():
    torch.spyre.manual_seed(5)
    assert torch.spyre.initial_seed() == 5
    saved = torch.spyre.get_rng_state()
    a = torch.randn(10, device="spyre").cpu()
    torch.spyre.set_rng_state(saved)
    assert torch.equal(torch.randn(10, device="spyre").cpu(), a)
    states = torch.spyre.get_rng_state_all()
    assert len(states) == torch.spyre.device_count()
    torch.spyre.set_rng_state_all(states)
    assert torch.spyre.default_generators[0].initial_seed() == 5
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.spyre.default_generators[0].set_state(torch.zeros(8, dtype=torch.uint8))
    saved = torch.spyre.get_rng_state()
    with torch.random.fork_rng(devices=[0], device_type="spyre"):
        torch.randn(10, device="spyre")
        assert not torch.equal(torch.spyre.get_rng_state(), saved)
    assert torch.equal(torch.spyre.get_rng_state(), saved)


def test_distributions_have_their_moments():
    torch.spyre.manual_seed(0)
    n = 1 << 20
    u = torch.empty(n, device="spyre").uniform_(-2, 6).cpu()
    assert -2 <= u.min() and u.max() < 6
    assert abs(u.mean() - 2) < 5 * 8 / 12**0.5 / n**0.5
    z = torch.empty(n, device="spyre", dtype=torch.float16).normal_(1, 3).float().cpu()
    assert abs(z.mean() - 1) < 5 * 3 / n**0.5
    assert abs(z.std() - 3) < 0.02
    b = torch.empty(n, device="spyre", dtype=torch.bool).bernoulli_(0.3).cpu()
    assert abs(b.float().mean() - 0.3) < 5 * (0.21 / n) ** 0.5
    probs = torch.rand(100000).clamp(0.05, 0.95)
    draws = torch.stack([torch.bernoulli(probs.to("spyre")).cpu() for _ in range(20)]).mean(0)
    assert abs((draws - probs).mean()) < 0.01  # unbiased per element


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_each_random_op_draws_on_the_device_in_half_precision(dtype):
    # uniform_, normal_, exponential_, bernoulli_ (float p and tensor p), dropout and
    # multinomial in fp16 and bf16
    # (PyTorch's own device-generic suites test them in float32 only): bounds, moments
    # within 5 standard errors, and no CPU fallback.
    torch.spyre.manual_seed(3)
    torch.spyre.reset_fallback_counts()
    n = 1 << 18
    u = torch.empty(n, device="spyre", dtype=dtype).uniform_(-1, 3).float().cpu()
    assert -1 <= u.min() and u.max() <= 3  # rounding to fp16/bf16 may reach the upper bound
    assert abs(u.mean() - 1) < 5 * 4 / 12**0.5 / n**0.5 + 0.01
    z = torch.empty(n, device="spyre", dtype=dtype).normal_(-2, 0.5).float().cpu()
    assert abs(z.mean() + 2) < 5 * 0.5 / n**0.5 + 0.01
    assert abs(z.std() - 0.5) < 0.01
    b = torch.empty(n, device="spyre", dtype=dtype).bernoulli_(0.7).float().cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.7) < 5 * (0.21 / n) ** 0.5
    p = torch.full((n,), 0.2, device="spyre", dtype=dtype)
    bt = torch.bernoulli(p).float().cpu()
    assert abs(bt.mean() - 0.2) < 5 * (0.16 / n) ** 0.5 + 0.001
    x = torch.ones(n, device="spyre", dtype=dtype)
    d = torch.nn.functional.dropout(x, 0.5, training=True).float().cpu()
    assert set(d.unique().tolist()) <= {0.0, 2.0} and abs((d != 0).float().mean() - 0.5) < 5 * (0.25 / n) ** 0.5
    e = torch.empty(n, device="spyre", dtype=dtype).exponential_(4.0).float().cpu()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < 5 * 0.25 / n**0.5 + 0.002  # mean and sd 1/lambda
    probs = torch.tensor([0.1, 0.0, 0.3, 0.6], device="spyre", dtype=dtype)
    m = torch.multinomial(probs, 4096, replacement=True).cpu()
    freq = torch.bincount(m, minlength=4).float() / 4096
    assert freq[1] == 0 and (freq - torch.tensor([0.1, 0.0, 0.3, 0.6])).abs().max() < 5 * (0.25 / 4096) ** 0.5
    w = torch.multinomial(probs.expand(64, 4), 3).cpu()  # without replacement: distinct, never the zero
    assert all(len(set(row)) == 3 and 1 not in row for row in w.tolist())
    assert torch.spyre.fallback_counts() == {}


def test_dropout_keeps_each_element_with_probability_1_minus_p_and_scales_it():
    x = torch.randn(200000, device="spyre")
    torch.spyre.manual_seed(2)
    out, mask = torch.native_dropout(x, 0.25, True)
    assert mask.dtype == torch.bool
    torch.testing.assert_close(out.cpu(), x.cpu() * mask.cpu() / 0.75)
    assert abs(mask.cpu().float().mean() - 0.75) < 0.005
    assert torch.equal(torch.nn.functional.dropout(x, 0.25, training=False).cpu(), x.cpu())
    assert torch.equal(torch.nn.functional.dropout(x, 0.0).cpu(), x.cpu())
    assert torch.count_nonzero(torch.nn.functional.dropout(x, 1.0).cpu()) == 0
    # Through autograd: the gradient is the mask, scaled.
    w = torch.ones(1000, device="spyre", requires_grad=True)
    y = torch.nn.functional.dropout(w, 0.5)
    y.sum().backward()
    torch.testing.assert_close(w.grad.cpu(), (y.detach().cpu() != 0).float() * 2)
    assert "aten::native_dropout_backward" not in torch.spyre.fallback_counts()


def test_random_ops_without_a_device_kernel_follow_the_spyre_seed():
    torch.spyre.manual_seed(9)
    a = torch.randint(0, 1000, (50,), device="spyre").cpu()
    torch.rand(10)  # the CPU's generator is not what the fallback draws from
    torch.spyre.manual_seed(9)
    assert torch.equal(torch.randint(0, 1000, (50,), device="spyre").cpu(), a)
    d = torch.empty(20, device="spyre", dtype=torch.float64)
    torch.spyre.manual_seed(9)
    x = d.uniform_().cpu()  # float64: on the CPU, from the spyre stream
    torch.spyre.manual_seed(9)
    assert torch.equal(d.uniform_().cpu(), x)


PROGRAM = """
import torch, spyre_sim
torch.spyre.manual_seed(1234)
values = [torch.randn(3, 50, 70, device="spyre"), torch.rand(10001, device="spyre", dtype=torch.float16),
          torch.nn.functional.dropout(torch.ones(5000, device="spyre"), 0.5)]
print(torch.spyre.get_device_properties(0).cores)
print(",".join(str(hash(tuple(v.cpu().flatten().tolist()))) for v in values))
"""


def test_a_seed_gives_the_same_numbers_on_8_and_32_cores():
    outputs = []
    for cores in (8, 32):
        env = dict(os.environ, SPYRE_SIM_SET=f"cores.count={cores}", PYTHONPATH=str(REPO / "python"))
        env.pop("SPYRE_SIM_CONFIG", None)
        out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert int(lines[0]) == cores
        outputs.append(lines[1])
    assert outputs[0] == outputs[1]
