"""How far the card's DL16 numerics move results from fp32, next to plain fp16: an MLP
and a Llama-style block (spyre_sim.models), fp16 on the device, against the same model
in fp32 on the CPU.

    tools/dev run python3 backend/bench/dl16_numerics.py

Each numerics runs in its own process (the driver's config is per process), on the
functional device (the values are the timed device's: tests/sim/executor_test.cpp).
"""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

CHILD = """
import json, torch, spyre_sim
from spyre_sim.models import GptMlp, SwiGLU
spyre_sim.configure(overrides={overrides!r}, devices=1, mode="functional")
out = {{}}
for name, model, shape in (("GPT MLP 64x512->2048", GptMlp(512, 2048), (64, 512)),
                           ("Llama SwiGLU 64x512->1408", SwiGLU(512, 1408), (64, 512))):
    torch.manual_seed(0)
    model = model.eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    x = torch.randn(*shape)
    with torch.no_grad():
        want = model(x)
        got = model.half().to("spyre")(x.half().to("spyre")).float().cpu()
    err = (got - want).abs()
    out[name] = {{"max_abs": err.max().item(), "mean_abs": err.mean().item(),
                 "rel_rms": (err.pow(2).mean().sqrt() / want.pow(2).mean().sqrt()).item()}}
print(json.dumps(out))
"""


def run(overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_SIM_")}
    env["PYTHONPATH"] = str(REPO / "python")
    out = subprocess.run([sys.executable, "-c", CHILD.format(overrides=overrides)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        sys.exit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ieee, dl16 = run([]), run(["numerics.half_precision=dl16"])
    print("fp16 on the device against fp32 on the CPU (default chip)")
    print(f"{'model':28} {'numerics':9} {'max |err|':>10} {'mean |err|':>11} {'rel. RMS':>9}")
    for name in ieee:
        for label, r in (("ieee fp16", ieee[name]), ("DL16", dl16[name])):
            print(f"{name:28} {label:9} {r['max_abs']:10.2e} {r['mean_abs']:11.2e} {r['rel_rms']:9.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
