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

__all__ = ["run", "generate", "report_text"]


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


def generate(model, prompt, gen, *, device=None, warmup=True, trace=None, name=None) -> dict:
    """Greedy generation on a spyre device, reported per phase (as ``spyre-sim run
    --workload llm:...``): time to first token, per-token decode latency, tokens/s.

    ``model(tokens, start_pos)`` returns logits ``[batch, length, vocab]`` for ``tokens``
    ``[batch, length]`` at positions ``start_pos ..``, keeping its own KV cache (the
    interface of Meta's reference Llama code); an ``nn.Module`` is moved to the device.
    ``prompt``: token ids ``[batch, length]``; ``gen``: tokens to generate (the first
    comes from the prefill, each other from one decode step of one token). ``warmup``
    runs the whole generation once first (kernels compiled and loaded). The generated
    tokens stay on the device until the end (no host round trip per token).

    Returns the report of the measured generation (``spyre_sim.run``'s schema) with an
    ``llm`` section: ``tokens`` (the generated ids, a list per sequence), ``ttft_us``,
    ``decode_us_per_token``, ``decode_tokens_per_s``, ``tokens_per_s`` (end to end),
    and ``prefill_bound_us`` / ``decode_bound_us_per_token``: the sum of the phase's
    kernels' roofline bounds (each kernel's FLOPs at the peak or its least DRAM
    traffic; a model-level bound such as weights + KV bytes can only be lower).
    """
    import torch

    if gen < 1:
        raise ValueError(f"generate: gen must be at least 1, found {gen}")
    dev = torch.device("spyre", torch.spyre.current_device() if device is None else torch.device(device).index or 0)
    index = dev.index or 0
    if isinstance(model, torch.nn.Module):
        model = model.to(dev)
    prompt = torch.as_tensor(prompt)
    if prompt.dim() != 2:
        raise ValueError(f"generate: prompt must be token ids [batch, length], found shape {tuple(prompt.shape)}")
    tokens = prompt.to(dev)

    def greedy(between=None):
        out = [model(tokens, 0)[:, -1:].argmax(-1)]
        if between:
            between()
        for i in range(1, gen):
            out.append(model(out[-1], tokens.shape[1] + i - 1)[:, -1:].argmax(-1))
        return out

    label = name or getattr(model, "__class__", type(model)).__name__
    phases = {}
    with torch.no_grad():
        if warmup:
            greedy()
            torch.spyre.synchronize(dev)
        torch.ops.spyre.reset_device_stats(index)
        torch.spyre.reset_fallback_counts()
        if trace:
            torch.ops.spyre.trace_start(index)

        def end_of_prefill():
            torch.spyre.synchronize(dev)
            phases["prefill"] = json.loads(torch.ops.spyre.run_report(index, label, 0.0))

        out = greedy(end_of_prefill)
        torch.spyre.synchronize(dev)
        if trace:
            torch.ops.spyre.trace_stop(index, str(trace))
    report = json.loads(torch.ops.spyre.run_report(index, label, 0.0))
    pm, m = phases["prefill"]["metrics"], report["metrics"]
    ttft, total = pm["time_us"], m["time_us"]
    prefill_bound = pm["roofline_fraction"] * ttft
    steps, decode = gen - 1, total - ttft
    decode_bound = m["roofline_fraction"] * total - prefill_bound
    report["llm"] = {
        "tokens": torch.cat([t.cpu() for t in out], 1).tolist(),
        "ttft_us": ttft,
        "prefill_bound_us": prefill_bound,
        "prefill_kernels": pm["kernels"],
        "decode_steps": steps,
        "decode_us_per_token": decode / steps if steps else 0.0,
        "decode_bound_us_per_token": decode_bound / steps if steps else 0.0,
        "decode_tokens_per_s": prompt.shape[0] * steps / (decode * 1e-6) if steps and decode > 0 else 0.0,
        "tokens_per_s": prompt.shape[0] * gen / (total * 1e-6) if total > 0 else 0.0,
    }
    return report


def report_text(report: dict) -> str:
    """The text form of a report (as ``spyre-sim run`` prints it)."""
    import torch

    return torch.ops.spyre.run_report_text(json.dumps(report))
