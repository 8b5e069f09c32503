"""Modelled throughput of torchvision CNNs on the default chip: one eager forward of
each model (random weights, evaluation mode, channels-last) at a batch size, its
modelled device time, images per second, kernels launched and CPU fallbacks, and the
share of the time in convolutions.

    tools/dev run python3 backend/bench/cnn_bench.py                 # batch 8, fp16, 224x224
    tools/dev run python3 backend/bench/cnn_bench.py --batch 1 --dtype float32 --models resnet18

The device runs in no-data mode (SPYRE_SIM_MODE=no-data unless set): the same kernels
and cycles without computing values, so a batch-8 resnet50 takes seconds of host time.
"""

import argparse
import os
import time

os.environ.setdefault("SPYRE_SIM_MODE", "no-data")

import torch  # noqa: E402
import torchvision  # noqa: E402

import spyre_sim  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["resnet18", "resnet50", "mobilenet_v3_small"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    print(f"torchvision CNNs, batch {args.batch}, {args.dtype}, {args.size}x{args.size}, channels-last, "
          f"eager, {os.environ['SPYRE_SIM_MODE']} mode")
    print(f"{'model':<20} {'modelled ms':>12} {'images/s':>10} {'kernels':>8} {'conv share':>11} "
          f"{'fallbacks':>9} {'host s':>7}")
    for name in args.models:
        model = getattr(torchvision.models, name)().eval().to(dtype).to(memory_format=torch.channels_last)
        model = model.to("spyre")
        x = torch.randn(args.batch, 3, args.size, args.size).to(dtype).to("spyre")
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            model(x)  # compile and load every kernel
            torch.spyre.reset_fallback_counts()
            start = time.time()
            report = spyre_sim.run(model, x)
            host = time.time() - start
        seconds = report["metrics"]["time_us"] * 1e-6  # the call's modelled time, idle gaps included
        kernels = sum(k["launches"] for k in report["kernels"])
        conv = sum(k["time_ps"] for k in report["kernels"] if k["name"].startswith("aten::convolution")) * 1e-12
        busy = sum(k["time_ps"] for k in report["kernels"]) * 1e-12
        fallbacks = sum(torch.spyre.fallback_counts().values())
        print(f"{name:<20} {seconds * 1e3:>12.2f} {args.batch / seconds:>10.1f} {kernels:>8} "
              f"{conv / busy * 100:>10.1f}% {fallbacks:>9} {host:>7.1f}")


if __name__ == "__main__":
    main()
