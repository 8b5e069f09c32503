"""The spyre process group under torchrun: every collective against the CPU on 2 and
4 ranks, five runs each, every rank's timestamps identical within a run and across
runs (tests/distributed/collectives.py does the checking on each rank); a
tensor-parallel Llama-style block on 2 and 4 ranks, by hand and through DTensor,
against the whole block on one card (tensor_parallel.py); and DistributedDataParallel
over 2 ranks against one process (ddp.py). Run 1 of each
sends every payload over TCP (SPYRE_C10D_NO_SHM=1), the others large ones through
shared memory: the results and the timestamps may not depend on it.

  tools/dev run python3 tests/distributed/run.py [--runs 5] [--ranks 2 4]

ctest runs it as distributed:collectives (with the CI chip's config)."""

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(ranks: int, out: pathlib.Path, shm: bool = True, script: str = "collectives.py", args=()) -> list:
    cmd = [sys.executable, "-m", "spyre_sim.torchrun", "--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / script), *args, str(out)]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    env.pop("SPYRE_C10D_NO_SHM", None)
    if not shm:
        env["SPYRE_C10D_NO_SHM"] = "1"
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"torchrun --nproc-per-node {ranks} failed ({run.returncode}):\n{run.stdout[-3000:]}\n"
                         f"{run.stderr[-6000:]}")
    return [json.loads(pathlib.Path(f"{out}.{r}.json").read_text()) for r in range(ranks)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            first = None
            for run in range(args.runs):
                start = time.time()
                results = launch(ranks, pathlib.Path(tmp) / f"n{ranks}r{run}", shm=run != 1)
                problems = [f for r in results for f in r["failures"]]
                ends = [r["ends"] for r in results]
                if any(e != ends[0] for e in ends):
                    problems.append("the ranks' collective end times differ")
                shm = sum(r["shared_memory_payloads"] for r in results)
                if (shm > 0) != (run != 1):
                    problems.append(f"{shm} payloads went through shared memory in a {'tcp' if run == 1 else 'shm'} run")
                p2p = [r["p2p_ends"] for r in results]
                if first is not None and (ends[0] != first[0] or p2p != first[1]):
                    problems.append(f"run {run}'s end times differ from run 0's")
                first = first if first is not None else (ends[0], p2p)
                r0 = results[0]
                print(f"{ranks} ranks, run {run} ({'tcp' if run == 1 else 'shm'}): {len(ends[0])} collectives, ring all-reduce of 16 MiB modelled "
                      f"{r0['modelled_ms']:.4f} ms against 2(N-1)/N x S/B + 2(N-1) x L = {r0['formula_ms']:.4f} ms; "
                      f"last end {ends[0][-1]} ps; {shm} payloads by shared memory; {time.time() - start:.1f} s; "
                      f"{'ok' if not problems else 'FAILED'}", flush=True)
                for p in problems[:20]:
                    print("   ", p)
                passed += not problems
                failed += bool(problems)
        # The tensor-parallel Llama-style block, by hand and through DTensor.
        for ranks in args.ranks:
            for mode in ("hand", "dtensor"):
                start = time.time()
                results = launch(ranks, pathlib.Path(tmp) / f"tp{ranks}{mode}", script="tensor_parallel.py",
                                 args=(mode,))
                problems = [f for r in results for f in r["failures"]]
                r0 = results[0]
                print(f"tensor-parallel Llama-style block ({mode}), {ranks} ranks: output within "
                      f"{max(r['error'] for r in results):.1e} of the whole block's; modelled {r0['tp_ms']:.4f} ms "
                      f"against {r0['single_ms']:.4f} ms on one card ({r0['single_ms'] / r0['tp_ms']:.2f}x), "
                      f"communication {r0['communication_ms']:.4f} ms ({100 * r0['communication_ms'] / r0['tp_ms']:.1f}%); "
                      f"{time.time() - start:.1f} s; {'ok' if not problems else 'FAILED'}", flush=True)
                for p in problems[:20]:
                    print("   ", p)
                passed += not problems
                failed += bool(problems)
        # DistributedDataParallel over 2 ranks against one process on the whole batch.
        start = time.time()
        results = launch(2, pathlib.Path(tmp) / "ddp", script="ddp.py")
        problems = [f for r in results for f in r["failures"]]
        # The buckets' all-reduces run on the group's collective stream while the
        # backward goes on: each rank computes and communicates at once for a while.
        busy = results[0]["busy_ps"]
        for r in results:
            if not 0 < r["busy_ps"]["overlap"] <= min(r["busy_ps"]["compute"], r["busy_ps"]["communication"]):
                problems.append(f"rank {r['rank']}: no overlap of communication with compute: {r['busy_ps']}")
        print(f"DDP over 2 ranks, 3 SGD steps: gradients and parameters against one process "
              f"{'ok' if not problems else 'FAILED'} ({results[0]['communication']['collectives']} collectives on rank "
              f"0; computing {busy['compute'] * 1e-6:.1f} us, communicating {busy['communication'] * 1e-6:.1f} us, "
              f"both at once {busy['overlap'] * 1e-6:.1f} us; {time.time() - start:.1f} s)", flush=True)
        for p in problems[:20]:
            print("   ", p)
        passed += not problems
        failed += bool(problems)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
