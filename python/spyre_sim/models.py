"""Small reference blocks of real models, for what-if runs, benchmarks and tests:
the shapes and op mixes transformer layers put on a device, without a model zoo.

- ``GptMlp(d, hidden, written_gelu=False)``: Linear, GELU (tanh), Linear (GPT's
  feed-forward); ``written_gelu`` writes the GELU out in ops, as Hugging Face's GPT-2
  does (``gelu_new``).
- ``SwiGLU(d, hidden)``: RMSNorm, then a gated feed-forward with the residual (Llama's).
- ``LlamaBlock(d, heads, kv_heads, hidden, max_len, written_out=False)``: a whole Llama
  decoder layer over a sequence (``nn.RMSNorm``, rotary embeddings from precomputed
  tables, causal grouped-query attention, SwiGLU, residuals); ``written_out`` writes the
  norms and the grouped heads as Hugging Face's Llama does (``WrittenRMSNorm``,
  ``repeat_kv``).
- ``Gpt2Block(d, heads, hidden, written_gelu=False)``: a whole GPT-2 layer (pre-norm ``nn.LayerNorm``, fused
  QKV projection with bias, causal attention, GELU (tanh) MLP, residuals).
"""

import math

import torch
import torch.nn.functional as F

__all__ = ["GptMlp", "SwiGLU", "LlamaBlock", "Gpt2Block", "WrittenRMSNorm", "gelu_new", "repeat_kv"]


def gelu_new(x):
    """GELU (tanh) written out in elementwise ops, as Hugging Face's GPT-2 (its
    ``NewGELUActivation``, activation "gelu_new") computes it."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GptMlp(torch.nn.Module):
    """A GPT-style feed-forward block: Linear, GELU (tanh), Linear. ``written_gelu``:
    the GELU written out in ops, as Hugging Face's GPT-2 has it (``gelu_new``)."""

    def __init__(self, d: int, hidden: int, written_gelu: bool = False):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)
        self.written_gelu = written_gelu

    def forward(self, x):
        h = self.up(x)
        return self.down(gelu_new(h) if self.written_gelu else F.gelu(h, approximate="tanh"))


class SwiGLU(torch.nn.Module):
    """A Llama-style block: RMSNorm (weight ``norm``), then silu(w1 h) * w3 h through w2,
    plus the residual."""

    def __init__(self, d: int, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.norm = torch.nn.Parameter(torch.ones(d))
        self.w1 = torch.nn.Linear(d, hidden, bias=False)
        self.w3 = torch.nn.Linear(d, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class WrittenRMSNorm(torch.nn.Module):
    """RMSNorm as Hugging Face's ``LlamaRMSNorm`` writes it: the input upcast to fp32, its
    mean square, rsqrt, the product cast back, then the weight."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def repeat_kv(h, groups: int):
    """K or V [b, kv_heads, s, d] with each head repeated for its group of query heads
    (Hugging Face's and Llama's reference code's way to grouped-query attention): a copy."""
    b, kv_heads, s, d = h.shape
    return h[:, :, None, :, :].expand(b, kv_heads, groups, s, d).reshape(b, kv_heads * groups, s, d)


class LlamaBlock(torch.nn.Module):
    """A Llama decoder layer over a whole sequence ``x [batch, length, d]`` (a prefill):
    RMSNorm, Q/K/V projections, rotary embeddings (cos/sin tables for ``max_len``
    positions, buffers), causal grouped-query attention, output projection, residual,
    RMSNorm, SwiGLU feed-forward, residual. ``written_out``: the norms and the grouped
    heads as Hugging Face's Llama writes them (``LlamaRMSNorm``: statistics in fp32, in
    elementwise ops; ``repeat_kv``: K and V copied to every query head before the
    attention) instead of ``nn.RMSNorm`` and ``enable_gqa``."""

    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int, max_len: int = 4096, theta: float = 10000.0,
                 written_out: bool = False):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.written_out = written_out
        norm = WrittenRMSNorm if written_out else torch.nn.RMSNorm
        self.n1, self.n2 = norm(d), norm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.w1 = torch.nn.Linear(d, hidden, bias=False)
        self.w3 = torch.nn.Linear(d, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, d, bias=False)
        inv = theta ** (-torch.arange(0, self.hd, 2).float() / self.hd)
        angles = torch.arange(max_len).float()[:, None] * inv[None, :]
        angles = torch.cat([angles, angles], -1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rotate(self, z, cos, sin):
        half = z.shape[-1] // 2
        return z * cos + torch.cat([-z[..., half:], z[..., :half]], -1) * sin

    def forward(self, x):
        b, t, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        if self.written_out and self.kv_heads != self.heads:
            k, v = repeat_kv(k, self.heads // self.kv_heads), repeat_kv(v, self.heads // self.kv_heads)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads and not self.written_out)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Gpt2Block(torch.nn.Module):
    """A GPT-2 layer over a whole sequence ``x [batch, length, d]``: LayerNorm, fused QKV
    projection (with bias), causal attention, output projection, residual, LayerNorm,
    Linear, GELU (tanh; ``written_gelu``: written out in ops as Hugging Face's GPT-2 has
    it), Linear, residual."""

    def __init__(self, d: int, heads: int, hidden: int, written_gelu: bool = False):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = GptMlp(d, hidden, written_gelu)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))
