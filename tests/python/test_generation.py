"""A tiny Llama-style LM (3 layers: RMSNorm, rotary embeddings, grouped-query attention
with a KV cache, SwiGLU) generating 16 tokens greedily on spyre, eagerly and compiled,
fp32 and fp16, with no CPU fallbacks: the generated tokens against the CPU's. A GPT-2
block and a Llama-style block, eager and compiled, against the CPU."""

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, KV_HEADS, FFN, VOCAB, LAYERS, CACHE = 64, 4, 2, 128, 100, 3, 32
PROMPT, STEPS = [1, 5, 7, 9], 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        hd = D // HEADS
        self.q, self.o = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
        self.k, self.v = nn.Linear(D, hd * KV_HEADS, bias=False), nn.Linear(D, hd * KV_HEADS, bias=False)
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.gate, self.up = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def forward(self, x, pos, cache, cos, sin):
        b, t, _ = x.shape
        hd = D // HEADS
        h = self.n1(x)
        q = self.q(h).view(b, t, HEADS, hd).transpose(1, 2)
        k = self.k(h).view(b, t, KV_HEADS, hd).transpose(1, 2)
        v = self.v(h).view(b, t, KV_HEADS, hd).transpose(1, 2)

        def rotate(z):
            z1, z2 = z[..., ::2], z[..., 1::2]
            return torch.stack([z1 * cos - z2 * sin, z1 * sin + z2 * cos], -1).flatten(-2)

        q, k = rotate(q), rotate(k)
        k_cache, v_cache = cache
        k_cache[:, :, pos:pos + t] = k
        v_cache[:, :, pos:pos + t] = v
        # Written as Hugging Face's Llama writes it: under torch.compile a conditional on
        # the (dynamic) length is a guard, not a graph break as `is_causal=t > 1` is.
        causal = True if t > 1 else False  # noqa: SIM210
        a = F.scaled_dot_product_attention(q, k_cache[:, :, :pos + t], v_cache[:, :, :pos + t], is_causal=causal,
                                           enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rotary(pos, t, device, dtype):
    """The rotary tables for positions pos .. pos + t - 1: base ** (2i / d) and the
    positions, made on the device in fp32, then in the model's dtype. Computed once per
    forward and shared by the layers, as Hugging Face's and Meta's Llama code do."""
    hd = D // HEADS
    inv = 1.0 / torch.pow(10000.0, torch.arange(0, hd, 2, device=device).float() / hd)
    angles = torch.arange(pos, pos + t, device=device).float()[:, None] * inv[None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.RMSNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids, pos, caches):
        x = self.embed(ids)
        cos, sin = rotary(pos, ids.shape[1], x.device, x.dtype)
        for block, cache in zip(self.blocks, caches):
            x = block(x, pos, cache, cos, sin)
        return self.head(self.norm(x))


def generate(model, device, dtype):
    """Greedy tokens and each step's last logits (float32, on the CPU)."""
    caches = [tuple(torch.zeros(1, KV_HEADS, CACHE, D // HEADS, device=device, dtype=dtype) for _ in range(2))
              for _ in range(LAYERS)]
    x, pos, tokens, logits = torch.tensor([PROMPT], device=device), 0, [], []
    with torch.no_grad():
        for _ in range(STEPS):
            out = model(x, pos, caches)[:, -1]
            pos += x.shape[1]
            x = out.argmax(-1, keepdim=True)
            tokens.append(x.item())
            logits.append(out.float().cpu()[0])
    return tokens, logits


@pytest.fixture(scope="module")
def weights():
    torch.manual_seed(0)
    return TinyLM().state_dict()


def model_on(weights, device, dtype):
    m = TinyLM()
    m.load_state_dict(weights)
    return m.to(device, dtype)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_tiny_lm_generates_the_cpu_tokens_without_fallbacks(weights, dtype, compiled):
    want, ref_logits = generate(model_on(weights, "cpu", torch.float32), "cpu", torch.float32)
    model = model_on(weights, "spyre", dtype)
    if compiled:
        torch._dynamo.reset()
        model = torch.compile(model, backend="spyre", dynamic=True)
    torch.spyre.reset_fallback_counts()
    torch._dynamo.utils.counters.clear()
    got, _ = generate(model, "spyre", dtype)
    assert torch.spyre.fallback_counts() == {}
    if compiled:
        # The prompt's graph, then one for the whole decode loop, not one per token.
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    if dtype == torch.float32:
        assert got == want
        return
    # fp16: the fp32 reference's token wherever its top two logits are more than 0.05
    # apart, until the first step that could go either way.
    for step, (g, w, logits) in enumerate(zip(got, want, ref_logits)):
        top2 = logits.topk(2).values
        if top2[0] - top2[1] <= 0.05:
            break
        assert g == w, f"step {step}: {g} != {w} (gap {float(top2[0] - top2[1]):.3f})"


def test_a_compiled_32_token_decode_loop_compiles_at_most_twice(weights):
    torch._dynamo.reset()
    model = torch.compile(model_on(weights, "spyre", torch.float32), backend="spyre", dynamic=True)
    cpu = model_on(weights, "cpu", torch.float32)
    caches = [tuple(torch.zeros(1, KV_HEADS, 40, D // HEADS, device=d) for _ in range(2)) for _ in range(LAYERS)
              for d in ("spyre", "cpu")]
    dev_caches, cpu_caches = caches[0::2], caches[1::2]
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        x, want = model(ids.to("spyre"), 0, dev_caches)[:, -1:].argmax(-1), cpu(ids, 0, cpu_caches)[:, -1:].argmax(-1)
        after_prefill = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        for step in range(32):
            pos = len(PROMPT) + step
            x, want = model(x, pos, dev_caches)[:, -1:].argmax(-1), cpu(want, pos, cpu_caches)[:, -1:].argmax(-1)
            assert x.item() == want.item()
    assert after_prefill == 1
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - after_prefill <= 2


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fp16_tiny_lm_keeps_its_dtype_on_the_device(weights, compiled):
    # Conversion kernels (reported under their own name) are under 5% of launches
    # eagerly: what remains is what the model asks for (positions and frequencies to
    # fp32, the rotary tables back to fp16, the logits to fp32). Compiled, the conversions
    # fuse into the kernels around them (integer aranges become float aranges), leaving
    # one per step: the generation loop's logits.float(), outside the model.
    import json

    model = model_on(weights, "spyre", torch.float16)
    if compiled:
        torch._dynamo.reset()
        model = torch.compile(model, backend="spyre", dynamic=True)
    generate(model, "spyre", torch.float16)  # compiles and loads the kernels
    torch.spyre.synchronize()
    torch.ops.spyre.reset_device_stats(0)
    generate(model, "spyre", torch.float16)
    torch.spyre.synchronize()
    kernels = json.loads(torch.ops.spyre.run_report(0, "tiny", 0.0))["kernels"]
    launches = {}  # (a row per launch, or per kernel once the device dropped records)
    for k in kernels:
        launches[k["name"]] = launches.get(k["name"], 0) + k["launches"]
    conversions, total = launches.get("aten::copy_ (dtype conversion)", 0), sum(launches.values())
    if compiled:
        assert conversions == STEPS
    else:
        assert 0 < conversions < 0.05 * total


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        heads = lambda z: z.view(b, t, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class LlamaBlock(nn.Module):
    """One Block of the tiny LM over a whole sequence (its own cache)."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        cache = tuple(torch.zeros(x.shape[0], KV_HEADS, x.shape[1], D // HEADS, device=x.device, dtype=x.dtype)
                      for _ in range(2))
        return self.block(x, 0, cache, *rotary(0, x.shape[1], x.device, x.dtype))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("kind", [GPT2Block, LlamaBlock], ids=lambda k: k.__name__)
def test_transformer_blocks_run_without_fallbacks(kind, dtype, compiled):
    torch.manual_seed(1)
    block, x = kind(), torch.randn(2, 48, D)
    with torch.no_grad():
        want = block(x)
        dev = kind()
        dev.load_state_dict(block.state_dict())
        dev = dev.to("spyre", dtype)
        if compiled:
            torch._dynamo.reset()
            dev = torch.compile(dev, backend="spyre")
        torch.spyre.reset_fallback_counts()
        got = dev(x.to("spyre", dtype))
    assert torch.spyre.fallback_counts() == {}
    tol = dict(atol=2e-4, rtol=2e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(got.float().cpu(), want, **tol)


def caches_on(device, dtype):
    return [tuple(torch.zeros(1, KV_HEADS, CACHE, D // HEADS, device=device, dtype=dtype) for _ in range(2))
            for _ in range(LAYERS)]


def test_generate_reports_the_phases_of_a_users_model(weights):
    import spyre_sim

    want, _ = generate(model_on(weights, "cpu", torch.float32), "cpu", torch.float32)
    model, caches = model_on(weights, "spyre", torch.float32), caches_on("spyre", torch.float32)
    r = spyre_sim.generate(lambda ids, pos: model(ids, pos, caches), torch.tensor([PROMPT]), STEPS)
    g, m = r["llm"], r["metrics"]
    assert g["tokens"] == [want]
    assert m["cpu_fallbacks"] == 0
    assert g["decode_steps"] == STEPS - 1
    assert 0 < g["prefill_bound_us"] < g["ttft_us"] < m["time_us"]
    assert 0 < g["decode_bound_us_per_token"] < g["decode_us_per_token"]
    # The prefill is its own run's time: a generation of one token (no decode step), to
    # 1% (the allocator's addresses, and so DRAM channel collisions, differ by history).
    one = spyre_sim.generate(lambda ids, pos: model(ids, pos, caches), torch.tensor([PROMPT]), 1)
    assert one["llm"]["tokens"] == [want[:1]] and one["llm"]["decode_steps"] == 0
    assert one["metrics"]["time_us"] == pytest.approx(g["ttft_us"], rel=0.01)
    assert g["decode_us_per_token"] > 0.01 * g["ttft_us"]  # so 1% tells the phases apart
    with pytest.raises(ValueError, match="token ids"):
        spyre_sim.generate(lambda ids, pos: model(ids, pos, caches), torch.tensor(PROMPT), 2)


NO_DATA_SCRIPT = r"""
import sys, torch, spyre_sim
sys.path.insert(0, {tests!r})
import test_generation as t
spyre_sim.configure(mode="no-data")
with torch.device("meta"):
    model = t.TinyLM().half()
model = model.to_empty(device="spyre")
caches = t.caches_on("spyre", torch.float16)
r = spyre_sim.generate(lambda ids, pos: model(ids, pos, caches), torch.tensor([t.PROMPT]), 4)
print(r["llm"]["tokens"], r["metrics"]["cpu_fallbacks"], r["llm"]["ttft_us"] > 0, r["llm"]["decode_us_per_token"] > 0)
"""


def test_a_model_made_on_meta_generates_on_a_device_without_data(tmp_path):
    # Timing-only: the model's parameters are allocated on the device and never written
    # (to_empty); float values are not computed and read as zeros, so argmax picks token
    # 0 every step; the integer tokens themselves are real data.
    import os
    import pathlib
    import subprocess
    import sys

    tests = str(pathlib.Path(__file__).resolve().parent)
    p = subprocess.run([sys.executable, "-c", NO_DATA_SCRIPT.format(tests=tests)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "SPYRE_SIM_DEVICES": "1"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[-2] == "[[0, 0, 0, 0]] 0 True True"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_rms_norm_is_one_kernel_with_pytorchs_numerics(dtype):
    import spyre_sim

    torch.manual_seed(2)
    x = torch.randn(4, 7, 96, dtype=dtype)
    for weight in (None, torch.randn(96, dtype=dtype), torch.randn(96)):  # an fp32 weight promotes the output
        for eps in (None, 1e-5):  # None: the input dtype's epsilon, as PyTorch's
            want = F.rms_norm(x, (96,), weight, eps)
            w = None if weight is None else weight.to("spyre")
            r = spyre_sim.run(lambda: F.rms_norm(x.to("spyre"), (96,), w, eps), warmup=1)
            assert [k["name"] for k in r["kernels"] if k["name"] != "aten::copy_"] == ["aten::rms_norm"]
            got = F.rms_norm(x.to("spyre"), (96,), w, eps).cpu()
            assert got.dtype == want.dtype
            if dtype == torch.float32:
                torch.testing.assert_close(got, want)
            else:  # the same roundings as PyTorch's composite: bit for bit
                assert torch.equal(got, want)


def test_rms_norm_with_gradients_runs_the_composite_on_the_device():
    torch.manual_seed(3)
    x, w = torch.randn(4, 6, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    want = F.rms_norm(x, (6, 8), w, 1e-5)
    want.square().sum().backward()
    xs, ws = x.detach().to("spyre").requires_grad_(), w.detach().to("spyre").requires_grad_()
    torch.spyre.reset_fallback_counts()
    got = F.rms_norm(xs, (6, 8), ws, 1e-5)
    got.square().sum().backward()
    assert torch.spyre.fallback_counts() == {}
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(xs.grad.cpu(), x.grad)
    torch.testing.assert_close(ws.grad.cpu(), w.grad)
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 7\]"):
        F.rms_norm(xs.detach(), (7,))
