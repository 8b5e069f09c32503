"""Run a user's model on the simulated device and get the spyre-sim report.

    import torch, spyre_sim
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
    report = spyre_sim.run(model.half(), torch.randn(64, 512).half(), trace="mlp.json")
    print(spyre_sim.report_text(report))

The report is the JSON of ``spyre-sim run --json`` (schema_version 1): modelled time
and cycles, per-kernel breakdown (named after the aten ops) with roofline fractions,
utilisation, DRAM/ring/PCIe traffic, CPU fallbacks and energy; the same code builds
it (backend/report). Compare two with ``spyre-sim diff``.
"""

import json

__all__ = ["run", "report_text"]


def _to(x, device):
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def run(model, *inputs, device=None, warmup=1, trace=None, name=None, flops=0.0) -> dict:
    """Runs ``model(*inputs)`` on a spyre device and returns the report of one run.

    The model (an ``nn.Module`` is moved to the device) and the inputs are placed on
    the device; ``warmup`` runs compile and load every kernel; then the device's
    statistics are reset and one measured run is reported. ``trace``: a path for a
    Perfetto/Chrome JSON trace of the measured run. ``flops``: the model's useful
    floating-point operations, if known (else 2 x the MACs the device counted).
    """
    import torch

    dev = torch.device("spyre", torch.spyre.current_device() if device is None else torch.device(device).index or 0)
    index = dev.index or 0
    if isinstance(model, torch.nn.Module):
        model = model.to(dev)
    args = _to(inputs, dev)
    with torch.no_grad():
        for _ in range(warmup):
            model(*args)
        torch.ops.spyre.reset_device_stats(index)
        torch.spyre.reset_fallback_counts()
        if trace:
            torch.ops.spyre.trace_start(index)
        model(*args)
        torch.spyre.synchronize(dev)
        if trace:
            torch.ops.spyre.trace_stop(index, str(trace))
    label = name or getattr(model, "__class__", type(model)).__name__
    return json.loads(torch.ops.spyre.run_report(index, label, float(flops)))


def report_text(report: dict) -> str:
    """The text form of a report (as ``spyre-sim run`` prints it)."""
    import torch

    return torch.ops.spyre.run_report_text(json.dumps(report))
