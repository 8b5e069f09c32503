"""DistributedDataParallel on spyre: each rank trains on its share of a batch, and the
gradients and parameters after every SGD step equal one process's on the whole batch
(on the CPU, fp32). Run by tests/distributed/run.py under torchrun; writes OUT.<rank>.json."""

import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import spyre_sim  # noqa: F401  (registers the backend)

dist.init_process_group("spyre")
rank, n = dist.get_rank(), dist.get_world_size()
failures = []


def mlp():
    return nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))


torch.manual_seed(0)
reference = mlp()
model = mlp()
if rank == 0:
    model.load_state_dict(reference.state_dict())  # DDP broadcasts rank 0's parameters
ddp = nn.parallel.DistributedDataParallel(model.to("spyre"), bucket_cap_mb=0.01)  # several buckets
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
per_rank = 8
for step in range(3):
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(per_rank * n, 16, generator=g), torch.randn(per_rank * n, 4, generator=g)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    opt.zero_grad()
    nn.functional.mse_loss(ddp(x[mine].to("spyre")), y[mine].to("spyre")).backward()
    ref_opt.zero_grad()
    nn.functional.mse_loss(reference(x), y).backward()  # the mean over the whole batch = DDP's average
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        err = ((p.grad.cpu() - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-12)).item()
        if err > 1e-4:
            failures.append(f"rank {rank} step {step}: {name}.grad {err:.2e} of the single process's")
    opt.step()
    ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        err = ((p.detach().cpu() - q.detach()).abs().max() / q.detach().abs().max()).item()
        if err > 1e-4:
            failures.append(f"rank {rank} step {step}: {name} {err:.2e} of the single process's")
report = torch.spyre.report(0)
with open(f"{sys.argv[1]}.{rank}.json", "w") as f:
    json.dump({"rank": rank, "failures": failures, "communication": report["communication"],
               "busy_ps": report["card_busy_ps"]}, f)
dist.destroy_process_group()
