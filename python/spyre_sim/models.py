"""Small reference blocks of real models, for what-if runs, benchmarks and tests:
the shapes and op mixes transformer layers put on a device, without a model zoo.

- ``GptMlp(d, hidden)``: Linear, GELU (tanh), Linear (GPT's feed-forward).
- ``SwiGLU(d, hidden)``: RMSNorm, then a gated feed-forward with the residual (Llama's).
"""

import torch
import torch.nn.functional as F

__all__ = ["GptMlp", "SwiGLU"]


class GptMlp(torch.nn.Module):
    """A GPT-style feed-forward block: Linear, GELU (tanh), Linear."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate="tanh"))


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
