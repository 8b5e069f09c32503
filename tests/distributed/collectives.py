"""Every collective of the spyre process group on every rank, against the CPU.

Run by torchrun (tests/distributed/run.py starts it: python3 -m spyre_sim.torchrun
--nproc-per-node N collectives.py OUT). Each rank can compute every rank's inputs
(seeded by rank), so each checks its results against a reference computed on the CPU
from all ranks' inputs: the CPU folding them in rank order in the dtype (what the
backend does, so equal bit for bit), and the gloo backend's result where gloo has the
op (within rounding: gloo sums in its own order). Writes OUT.<rank>.json: failures,
the end of every collective in simulated time (identical on every rank and every
run), the ends of the sends and recvs (identical on every run), and the modelled time of a ring all-reduce against 2(N-1)/N x S/B + 2(N-1) x L.
"""

import json
import sys

import torch
import torch.distributed as dist

import spyre_sim  # registers the backend
import spyre_sim.distributed

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]
SIZES = [1, 7, 1000, 4097]  # uneven: 4097 does not split over 2 or 4 ranks

dist.init_process_group("spyre")
gloo = dist.new_group(backend="gloo")
rank, n = dist.get_rank(), dist.get_world_size()
failures = []
ends = []


def data(r, numel, dtype, salt):
    g = torch.Generator().manual_seed(1000 * salt + 17 * r + numel)
    if dtype == torch.int32:
        return torch.randint(-9, 10, (numel,), generator=g, dtype=torch.int32)
    return (torch.rand(numel, generator=g) + 0.5).to(dtype)  # in [0.5, 1.5): products stay finite


def fold(tensors, op):
    acc = tensors[0].clone()
    for x in tensors[1:]:
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            acc.add_(x)
        elif op == dist.ReduceOp.PRODUCT:
            acc.mul_(x)
        elif op == dist.ReduceOp.MIN:
            torch.minimum(acc, x, out=acc)
        else:
            torch.maximum(acc, x, out=acc)
    if op == dist.ReduceOp.AVG:
        acc.div_(len(tensors))
    return acc


def check(what, got, want, exact=True):
    got = got.cpu()
    if exact:
        ok = torch.equal(got, want)
    else:
        tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(want.dtype, 1e-5)
        ok = got.shape == want.shape and torch.allclose(got.float(), want.float(), rtol=tol, atol=tol)
    if not ok:
        failures.append(f"rank {rank}: {what}: got {got.flatten()[:6].tolist()}, expected {want.flatten()[:6].tolist()}")


p2p_ends = []  # sends and recvs end when their own ranks say (a send is eager): per rank


def done(work=None, into=ends):
    if work is not None:
        work.wait()
    torch.spyre.synchronize()
    into.append(torch.spyre.report(0)["activity_ps"][1])


def spyre(t):
    return t.to("spyre")


for dtype in DTYPES:
    for numel in SIZES:
        tag = f"{dtype} x{numel}"
        everyone = [data(r, numel, dtype, 1) for r in range(n)]
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]
        if dtype.is_floating_point:
            ops.append(dist.ReduceOp.AVG)
        for op in ops:
            x = spyre(everyone[rank])
            work = dist.all_reduce(x, op=op, async_op=True)
            done(work)
            check(f"all_reduce {op} {tag}", x, fold(everyone, op))
            if op != dist.ReduceOp.AVG and dtype != torch.bfloat16:  # gloo has no AVG and no bf16 product
                y = everyone[rank].clone()
                dist.all_reduce(y, op=op, group=gloo)
                check(f"all_reduce {op} {tag} (gloo)", x, y, exact=False)
        root = n - 1
        x = spyre(everyone[rank])
        dist.broadcast(x, src=root)
        done()
        check(f"broadcast {tag}", x, everyone[root])
        x = spyre(everyone[rank])
        dist.reduce(x, dst=1 % n, op=dist.ReduceOp.SUM)
        done()
        if rank == 1 % n:
            check(f"reduce {tag}", x, fold(everyone, dist.ReduceOp.SUM))
        outs = [torch.empty(numel, dtype=dtype, device="spyre") for _ in range(n)]
        dist.all_gather(outs, spyre(everyone[rank]))
        done()
        for r in range(n):
            check(f"all_gather[{r}] {tag}", outs[r], everyone[r])
        flat = torch.empty(n * numel, dtype=dtype, device="spyre")
        dist.all_gather_into_tensor(flat, spyre(everyone[rank]))
        done()
        check(f"all_gather_into_tensor {tag}", flat, torch.cat(everyone))
        # reduce_scatter: rank r's inputs are chunks of data(r, n * numel).
        big = [data(r, n * numel, dtype, 2) for r in range(n)]
        out = torch.empty(numel, dtype=dtype, device="spyre")
        dist.reduce_scatter(out, [spyre(c) for c in big[rank].chunk(n)])
        done()
        want = fold([b[rank * numel:(rank + 1) * numel] for b in big], dist.ReduceOp.SUM)
        check(f"reduce_scatter {tag}", out, want)
        out = torch.empty(numel, dtype=dtype, device="spyre")
        dist.reduce_scatter_tensor(out, spyre(big[rank]))
        done()
        check(f"reduce_scatter_tensor {tag}", out, want)
        gathered = [torch.empty(numel, dtype=dtype, device="spyre") for _ in range(n)] if rank == 0 else None
        dist.gather(spyre(everyone[rank]), gathered, dst=0)
        done()
        if rank == 0:
            for r in range(n):
                check(f"gather[{r}] {tag}", gathered[r], everyone[r])
        out = torch.empty(numel, dtype=dtype, device="spyre")
        pieces = [spyre(b[:numel]) for b in big] if rank == root else None
        dist.scatter(out, pieces, src=root)
        done()
        check(f"scatter {tag}", out, big[rank][:numel])
        # all_to_all with uneven pieces: rank s sends (s + d + 1) x numel... kept small.
        sizes = lambda s, d: (s + 2 * d) % 3 + numel % 5  # noqa: E731
        sent = [data(rank * n + d, sizes(rank, d), dtype, 3) for d in range(n)]
        received = [torch.empty(sizes(s, rank), dtype=dtype, device="spyre") for s in range(n)]
        dist.all_to_all(received, [spyre(t) for t in sent])
        done()
        for s in range(n):
            check(f"all_to_all[{s}] {tag}", received[s], data(s * n + rank, sizes(s, rank), dtype, 3))
        out = torch.empty(n * numel, dtype=dtype, device="spyre")
        dist.all_to_all_single(out, spyre(big[rank]))
        done()
        check(f"all_to_all_single {tag}", out, torch.cat([b[rank * numel:(rank + 1) * numel] for b in big]))
        # send/recv around the ring, every rank sending first (sends are eager), then the
        # same as isend/irecv pairs on one stream, then back the other way with a tag.
        x = spyre(everyone[rank])
        got = torch.empty(numel, dtype=dtype, device="spyre")
        dist.send(x, (rank + 1) % n)
        dist.recv(got, (rank - 1) % n)
        done(into=p2p_ends)
        check(f"send/recv {tag}", got, everyone[(rank - 1) % n])
        got = torch.empty(numel, dtype=dtype, device="spyre")
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % n),
                                        dist.P2POp(dist.irecv, got, (rank - 1) % n)])
        for w in works:
            w.wait()
        done(into=p2p_ends)
        check(f"isend/irecv {tag}", got, everyone[(rank - 1) % n])
        got = torch.empty(numel, dtype=dtype, device="spyre")
        sending = dist.isend(x, (rank - 1) % n, tag=7)
        dist.recv(got, (rank + 1) % n, tag=7)
        sending.wait()
        done(into=p2p_ends)
        check(f"send/recv tag 7 {tag}", got, everyone[(rank + 1) % n])

dist.barrier()
done()

# Ranks that disagree fail together, fast, with the reason (not at the timeout), and
# the group and the stream keep working.
bad = torch.ones(4 + (rank == 1), device="spyre")
try:
    dist.all_reduce(bad)
    failures.append(f"rank {rank}: an all_reduce of mismatched sizes did not fail")
except RuntimeError as e:
    if "bytes from rank" not in str(e) and "failed it" not in str(e):
        failures.append(f"rank {rank}: a mismatched all_reduce failed with an unexpected message: {e}")
x = torch.ones(3, device="spyre")
dist.all_reduce(x)
check("all_reduce after a failed one", x, torch.full((3,), float(n)))

# The modelled time of a ring all-reduce of S bytes, after a barrier puts every rank at
# one instant: 2(N-1)/N x S/B + 2(N-1) x L. The CI chip's host link is PCIe Gen5 x16 at
# 85%: B = 32e9 x 16 x 128/130 / 8 x 0.85 B/s; behind the default switch a transfer's
# latency is host_link.latency_ns + switch_latency_ns = 1000 + 150 ns.
S = 16 << 20
x = torch.ones(S // 4, device="spyre")
dist.barrier()
torch.ops.spyre.reset_device_stats(0)  # the report's link bytes of this all-reduce alone
start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
start.record()
dist.all_reduce(x)
end.record()
end.synchronize()
modelled_ms = start.elapsed_time(end)
B = 32e9 * 16 * 128 / 130 / 8 * 0.85
formula_ms = (2 * (n - 1) / n * S / B + 2 * (n - 1) * 1150e-9) * 1e3
check("ring all_reduce values", x, torch.full((S // 4,), float(n)))
# Bytes per link: in each of the 2(N-1) steps this rank sends S/N bytes out of its port
# and into the next rank's (the report counts what this card sends, on its route).
links = torch.spyre.report(0)["communication"]["link_bytes"]
want_links = {f"spyre:{rank} port out": 2 * (n - 1) * S // n, f"spyre:{(rank + 1) % n} port in": 2 * (n - 1) * S // n}
if links != want_links:
    failures.append(f"rank {rank}: ring all_reduce's bytes per link {links}, expected {want_links}")
if abs(modelled_ms - formula_ms) > 0.05 * formula_ms:
    failures.append(f"rank {rank}: ring all_reduce of {S} bytes: modelled {modelled_ms:.4f} ms, "
                    f"formula {formula_ms:.4f} ms (more than 5% apart)")
done()
report = torch.spyre.report(0)
with open(f"{sys.argv[1]}.{rank}.json", "w") as f:
    json.dump({"rank": rank, "size": n, "failures": failures, "ends": ends, "p2p_ends": p2p_ends, "modelled_ms": modelled_ms,
               "formula_ms": formula_ms, "communication": report["communication"],
               "shared_memory_payloads": spyre_sim.distributed.extension().shared_memory_payloads()}, f)
dist.destroy_process_group()
