"""Host memory over many cached kernel launches (the robustness issue's bound: the RSS
after 1M launches within 16 MB of the RSS after the first 10k).

    tools/dev run python3 backend/bench/launch_memory.py [--launches 1000000]

An in-place add of 64 floats on spyre:0 (a cached kernel, one launch per call), on the
CI chip unless SPYRE_SIM_CONFIG says otherwise; prints the RSS after 10k launches, after
all of them, and after torch.spyre.report().
"""

import argparse
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
os.environ.setdefault("SPYRE_SIM_CONFIG", str(pathlib.Path(__file__).resolve().parents[2] / "configs" / "spyre-ci.yaml"))

import torch  # noqa: E402
import spyre_sim  # noqa: E402,F401


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=1_000_000)
    p.add_argument("--every", type=int, default=100_000, help="print the RSS (and synchronize) every this many launches")
    args = p.parse_args()
    a = torch.randn(64, device="spyre")
    b = torch.randn(64, device="spyre")
    for _ in range(10_000):
        a.add_(b)
    torch.spyre.synchronize()
    first = rss_mb()
    start = time.time()
    for i in range(args.launches - 10_000):
        a.add_(b)
        if i % args.every == args.every - 1:
            torch.spyre.synchronize()
            print(f"  {i + 10_001} launches: RSS {rss_mb():.1f} MB ({time.time() - start:.0f} s)", flush=True)
    torch.spyre.synchronize()
    last = rss_mb()
    torch.spyre.report()
    after_report = rss_mb()
    print(f"RSS after 10k launches {first:.1f} MB, after {args.launches} {last:.1f} MB "
          f"(+{last - first:.1f} MB), after torch.spyre.report() {after_report:.1f} MB")


if __name__ == "__main__":
    main()
