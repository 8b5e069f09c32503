"""The compiler's predicted kernel times against the simulated ones, on the default chip
and on the what-if configs a cost model must follow (issue: plans that follow the
config): 16x16 arrays, 4 corelets, SIMD depth 4, weight-stationary dataflow, a quarter
of the scratchpad, and fp32 operands.

    tools/dev run python3 backend/bench/predictions.py [--quick]

Runs `spyre-kernel-bench --predictions` once per config (about 10 s each) and prints
each table and, last, the largest error per config. Figures go in backend/README.md.
"""

import argparse
import os
import re
import subprocess
import sys

WHAT_IFS = [
    ("default", "", []),
    ("16x16 arrays", "cores.compute_array.rows=16;cores.compute_array.cols=16", []),
    ("4 corelets", "cores.corelets=4", []),
    ("SIMD depth 4", "cores.compute_array.simd_depth.fp16=4;cores.compute_array.simd_depth.bf16=4", []),
    ("ws dataflow", "cores.compute_array.dataflow=ws", []),
    ("quarter scratchpad", "cores.scratchpad.bytes=512 KiB;cores.scratchpad.usable_bytes=409 KiB", []),
    ("fp32", "", ["--fp32"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = parser.parse_args()
    worst = []
    for name, overrides, flags in WHAT_IFS:
        env = dict(os.environ, SPYRE_SIM_SET=overrides)
        cmd = ["spyre-kernel-bench", "--predictions", *flags] + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stdout + out.stderr, file=sys.stderr)
            return out.returncode
        table = out.stdout[out.stdout.index("predicted against"):]
        print(f"== {name}" + (f" ({overrides})" if overrides else ""))
        print(table.rstrip())
        worst.append((name, float(re.search(r"largest error ([0-9.]+)%", table).group(1))))
    print("\nlargest |error| per config: " + ", ".join(f"{n} {w:.1f}%" for n, w in worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
