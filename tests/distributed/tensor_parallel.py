"""A Llama-style block (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU)
sharded Megatron-style over the ranks' cards: Q, K, V, gate and up column-parallel
(each rank its heads, its KV heads and its slice of the hidden layer), the attention
output and down projections row-parallel with one all-reduce each. By hand, and
through PyTorch's DeviceMesh and parallelize_module (DTensor) when asked ("dtensor").
Each rank checks the sharded block's output against the whole block on its own card
(fp32, 1e-4 of the largest value) and reports the modelled times: the whole block on
one card, the sharded one, and its communication. Run under torchrun by
tests/distributed/run.py; writes OUT.<rank>.json."""

import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import spyre_sim  # noqa: F401  (registers the backend)

DIM, HEADS, KV_HEADS, FFN, SEQ = 256, 8, 4, 768, 128


def rope(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN, group=None):
        super().__init__()
        self.hd = DIM // HEADS
        self.heads, self.kv_heads, self.group = heads, kv_heads, group
        self.norm1, self.norm2 = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
        self.q = nn.Linear(DIM, heads * self.hd, bias=False)
        self.k = nn.Linear(DIM, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(DIM, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, DIM, bias=False)
        self.gate = nn.Linear(DIM, ffn, bias=False)
        self.up = nn.Linear(DIM, ffn, bias=False)
        self.down = nn.Linear(ffn, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, length, _ = x.shape
        h = self.norm1(x)
        # -1: the local heads (DTensor's colwise shards leave the module's counts whole).
        q = self.q(h).view(b, length, -1, self.hd).transpose(1, 2)
        k = self.k(h).view(b, length, -1, self.hd).transpose(1, 2)
        v = self.v(h).view(b, length, -1, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out = self.o(a.transpose(1, 2).reshape(b, length, -1))
        if self.group is not None:
            dist.all_reduce(out, group=self.group)  # row-parallel: the partial products summed
        x = x + out
        h = self.norm2(x)
        m = self.down(F.silu(self.gate(h)) * self.up(h))
        if self.group is not None:
            dist.all_reduce(m, group=self.group)
        return x + m


def shard(full, rank, n, group):
    """This rank's part of `full`: rows of the column-parallel weights, columns of the
    row-parallel ones."""
    part = Block(HEADS // n, KV_HEADS // n, FFN // n, group)
    rows = lambda w, i: w.chunk(n, dim=0)[i]  # noqa: E731
    cols = lambda w, i: w.chunk(n, dim=1)[i]  # noqa: E731
    with torch.no_grad():
        part.norm1.weight.copy_(full.norm1.weight)
        part.norm2.weight.copy_(full.norm2.weight)
        for name in ("q", "k", "v", "gate", "up"):
            getattr(part, name).weight.copy_(rows(getattr(full, name).weight, rank))
        for name in ("o", "down"):
            getattr(part, name).weight.copy_(cols(getattr(full, name).weight, rank))
    return part


def modelled(fn):
    start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    before = torch.spyre.report(0)["communication"]["time_ps"]
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    comm = torch.spyre.report(0)["communication"]["time_ps"] - before
    return out, start.elapsed_time(end), comm * 1e-9


def main():
    mode, out_path = sys.argv[1], sys.argv[2]
    dist.init_process_group("spyre")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    full = Block()
    with torch.no_grad():
        for p in full.parameters():
            if p.dim() == 2:
                p.mul_(4.0)  # larger than nn.Linear's default, so the block is far from the identity
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, SEQ, DIM, generator=g)
    pos = torch.arange(SEQ, dtype=torch.float32)[:, None]
    freq = 10000.0 ** (-torch.arange(0, DIM // HEADS, 2, dtype=torch.float32) / (DIM // HEADS))
    angles = torch.cat([pos * freq, pos * freq], dim=-1)
    cos, sin = angles.cos().to("spyre"), angles.sin().to("spyre")
    xd = x.to("spyre")
    whole = full.to("spyre")
    with torch.no_grad():
        whole(xd, cos, sin)  # compile and load its kernels
        want, single_ms, _ = modelled(lambda: whole(xd, cos, sin))
        if mode == "dtensor":
            from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415
            from torch.distributed.tensor.parallel import (  # noqa: PLC0415
                ColwiseParallel, RowwiseParallel, parallelize_module)

            mesh = init_device_mesh("spyre", (n,))
            sharded = Block()
            sharded.load_state_dict(full.state_dict())
            sharded = parallelize_module(sharded.to("spyre"), mesh, {
                "q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel(),
                "gate": ColwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()})
        else:
            sharded = shard(full.cpu(), rank, n, dist.group.WORLD).to("spyre")
        sharded(xd, cos, sin)
        got, tp_ms, comm_ms = modelled(lambda: sharded(xd, cos, sin))
    want, got = want.cpu(), got.cpu()
    err = ((got - want).abs().max() / want.abs().max()).item()
    failures = [] if err <= 1e-4 else [f"rank {rank} ({mode}, {n} ranks): {err:.2e} of the whole block's largest value"]
    with open(f"{out_path}.{rank}.json", "w") as f:
        json.dump({"rank": rank, "failures": failures, "error": err, "single_ms": single_ms, "tp_ms": tp_ms,
                   "communication_ms": comm_ms}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
