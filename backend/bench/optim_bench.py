"""One optimizer step over a model's parameters on the default chip: the launches it
takes, its modelled device time and the host's wall time, for SGD (momentum, weight
decay) and AdamW in their default (foreach) and fused (`fused=True`) forms, and
clip_grad_norm_.

    tools/dev run python3 backend/bench/optim_bench.py                  # resnet18's 62 parameters
    tools/dev run python3 backend/bench/optim_bench.py --model resnet50 --steps 3

The gradients are random; two steps run first (state made, kernels compiled), then
`--steps` measured steps, each reported as the median. A step's _foreach ops and fused
phases are one launch per list of tensors (backend/aten/foreach_ops.cpp), split only
where a launch's argument table is full.
"""

import argparse
import json
import statistics
import time

OPTIMIZERS = {
    "sgd": lambda p, torch: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4),
    "sgd fused": lambda p, torch: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4, fused=True),
    "adamw": lambda p, torch: torch.optim.AdamW(p, lr=1e-3),
    "adamw fused": lambda p, torch: torch.optim.AdamW(p, lr=1e-3, fused=True),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="a torchvision model (random weights)")
    parser.add_argument("--steps", type=int, default=5, help="measured steps (median reported)")
    args = parser.parse_args()
    import torch  # noqa: PLC0415
    import torchvision  # noqa: PLC0415

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)().to("spyre")
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    numel = sum(p.numel() for p in params)
    print(f"{args.model}: {len(params)} parameters, {numel / 1e6:.1f} M values, fp32")
    print(f"{'step':<15} {'launches':>8} {'modelled us':>12} {'host ms':>8} {'fallbacks':>9}")
    steps = {name: make(params, torch).step for name, make in OPTIMIZERS.items()}
    # clip_grad_norm_: the norms (_foreach_norm), their norm, one scaling of every gradient.
    steps["clip_grad_norm_"] = lambda: torch.nn.utils.clip_grad_norm_(params, 1e9)
    for name, step in steps.items():
        step()
        step()
        torch.spyre.synchronize()
        launches, modelled, wall = [], [], []
        torch.spyre.reset_fallback_counts()
        for _ in range(args.steps):
            torch.ops.spyre.reset_device_stats(0)
            start = time.perf_counter()
            step()
            torch.spyre.synchronize()
            wall.append(time.perf_counter() - start)
            report = json.loads(torch.ops.spyre.run_report(0, name, 0.0))
            launches.append(sum(k["launches"] for k in report["kernels"]))
            modelled.append(report["metrics"]["time_us"])
        fallbacks = sum(torch.spyre.fallback_counts().values())
        print(f"{name:<15} {statistics.median(launches):>8.0f} {statistics.median(modelled):>12.1f} "
              f"{statistics.median(wall) * 1e3:>8.1f} {fallbacks:>9}")


if __name__ == "__main__":
    main()
