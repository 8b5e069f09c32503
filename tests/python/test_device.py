"""Device identity: names, counts, current device, torch.accelerator."""

import pytest
import torch


def test_device_strings_parse_and_tensors_print_as_spyre():
    assert torch.device("spyre:1").type == "spyre" and torch.device("spyre:1").index == 1
    t = torch.ones(2, device="spyre")
    assert t.device == torch.device("spyre:0")
    assert "device='spyre:0'" in repr(t)
    assert torch._C._get_privateuse1_backend_name() == "spyre"


def test_device_count_comes_from_the_driver():
    # ctest runs this suite with SPYRE_SIM_DEVICES=2.
    assert torch.spyre.is_available()
    assert torch.spyre.device_count() == 2


def test_current_device_is_per_thread_and_settable():
    assert torch.spyre.current_device() == 0
    torch.spyre.set_device(1)
    try:
        t = torch.empty(3, device="spyre")
        assert t.device == torch.device("spyre:1")
    finally:
        torch.spyre.set_device(0)


def test_accelerator_api_sees_spyre():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("spyre")
    assert torch.accelerator.device_count() == 2
    torch.accelerator.synchronize()


def test_generated_methods_move_tensors_and_modules():
    t = torch.arange(4.0).spyre()
    assert t.is_spyre and t.device.type == "spyre"
    m = torch.nn.Linear(3, 2).spyre()
    assert next(m.parameters()).device.type == "spyre"


def test_bad_device_index_is_a_clear_error():
    import pytest

    with pytest.raises(RuntimeError, match="out of range"):
        torch.empty(1, device="spyre:5")


def test_device_name_properties_and_memory_info_come_from_the_simulated_chip():
    props = torch.spyre.get_device_properties(0)
    # The CI chip (configs/spyre-ci.yaml): 4 cores, 1 GiB of which the usable part.
    assert props.cores == props.multi_processor_count == 4
    assert props.name == torch.spyre.get_device_name(0) and "spyre" in props.name.lower()
    assert props.peak_ops_per_s["fp16"] > 0 and props.dram_deliverable_bytes_per_s > 0
    free, total = torch.spyre.mem_get_info(0)
    assert total == props.total_memory and 0 < free <= total
    torch.spyre.empty_cache()
    free0, _ = torch.spyre.mem_get_info(0)
    x = torch.empty(64 << 20, dtype=torch.uint8, device="spyre")
    free1, _ = torch.spyre.mem_get_info(0)
    assert free0 - free1 >= 64 << 20
    del x


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_autocast_casts_as_on_cuda_matmuls_down_softmax_in_fp32(dtype):
    assert dtype in torch.spyre.get_amp_supported_dtype()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)
    da, db = a.to("spyre").requires_grad_(), b.to("spyre")
    with torch.autocast("spyre", dtype=dtype):
        y = da @ db
        p = torch.softmax(y, -1)
    assert y.dtype == dtype and p.dtype == torch.float32
    want = (a.to(dtype).float() @ b.to(dtype).float()).to(dtype)
    torch.testing.assert_close(y.cpu(), want, rtol=2 * torch.finfo(dtype).eps, atol=1e-3)
    p.sum().backward()  # the casts are differentiable
    assert da.grad is not None and da.grad.dtype == torch.float32
    assert (da @ db).dtype == torch.float32  # outside the block: unchanged


def test_printing_a_tensor_runs_nothing_on_the_cpu_fallback_and_reads_like_cpu():
    x = torch.tensor([[1.5, -2.25, 3.0], [1e-5, 4e4, float("nan")]])
    torch.spyre.reset_fallback_counts()
    text = repr(x.to("spyre"))
    assert torch.spyre.fallback_counts() == {}
    assert text == repr(x)[:-1] + ", device='spyre:0')"
    # (The longer suffix may wrap the line differently.)
    half = " ".join(repr(x.half().to("spyre")).split())
    assert half == " ".join(repr(x.half()).replace("dtype=torch.float16", "device='spyre:0', dtype=torch.float16").split())


def test_grad_scaler_scales_unscales_and_steps_like_the_cpu():
    # torch.amp.GradScaler("spyre"): the same parameters and scale as the same loop on the
    # CPU; an inf gradient skips the step and halves the scale; its two _amp_* ops run on
    # the device (not the CPU fallback).
    torch.manual_seed(0)
    cpu = torch.nn.Linear(8, 4)
    dev = torch.nn.Linear(8, 4).to("spyre")
    dev.load_state_dict(cpu.state_dict())
    models = {"cpu": cpu, "spyre": dev}
    scalers = {d: torch.amp.GradScaler(d, init_scale=1024.0) for d in models}
    opts = {d: torch.optim.SGD(m.parameters(), lr=0.1) for d, m in models.items()}
    xs = [torch.randn(16, 8) for _ in range(3)]
    torch.ops.spyre.reset_fallback_counts()
    for step, x in enumerate(xs):
        for d, m in models.items():
            loss = m(x.to(d)).pow(2).mean()
            if step == 1:
                loss = loss * float("inf")
            scalers[d].scale(loss).backward()
            scalers[d].step(opts[d])
            scalers[d].update()
            opts[d].zero_grad()
    assert scalers["spyre"].get_scale() == scalers["cpu"].get_scale() == 512.0
    assert not [op for op in torch.ops.spyre.fallback_counts() if "_amp_" in op]
    torch.testing.assert_close(dev.weight.detach().cpu(), cpu.weight.detach(), rtol=1e-5, atol=1e-6)


def test_amp_unscale_and_update_scale_match_the_cpu_step_by_step():
    # The two ops GradScaler calls, on the device against PyTorch's CPU kernels: grads
    # with inf, -inf and NaN (fp32 and fp16, empty, non-contiguous) are unscaled and
    # found_inf accumulates; the scale backs off after an inf, grows every second clean
    # step (growth_interval 2), and does not grow into inf.
    torch.ops.spyre.reset_fallback_counts()
    grads = [torch.randn(5, 7), torch.randn(3).half(), torch.empty(0), torch.randn(4, 6)]
    for bad in (None, float("inf"), float("-inf"), float("nan")):
        per = {}
        for d in ("cpu", "spyre"):
            gs = [g.to(d, copy=True) for g in grads[:3]]
            gs.append(torch.empty(6, 4, device=d).t().copy_(grads[3]))  # non-contiguous on both
            if bad is not None:
                gs[1][2] = bad
            found = torch.zeros(1, device=d)
            torch._amp_foreach_non_finite_check_and_unscale_(gs, found, torch.full((1,), 0.25, device=d))
            per[d] = ([g.cpu() for g in gs], found.cpu())
        for a, b in zip(per["spyre"][0], per["cpu"][0]):
            torch.testing.assert_close(a, b, equal_nan=True)
        assert per["spyre"][1].item() == per["cpu"][1].item() == (0.0 if bad is None else 1.0)
    states = {d: (torch.full((1,), 2.0**126, device=d), torch.zeros(1, dtype=torch.int32, device=d)) for d in ("cpu", "spyre")}
    for found_inf in (0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0):
        for d, (scale, tracker) in states.items():
            torch._amp_update_scale_(scale, tracker, torch.full((1,), found_inf, device=d), 4.0, 0.5, 2)
        assert states["spyre"][0].item() == states["cpu"][0].item()
        assert states["spyre"][1].item() == states["cpu"][1].item()
    # 2**126 does not grow into inf (2**128 is not a float32), backs off to 2**125 after the
    # inf, grows to 2**127 after two clean steps, and stays there.
    assert states["spyre"][0].item() == 2.0**127
    assert not [op for op in torch.ops.spyre.fallback_counts() if "_amp_" in op]
