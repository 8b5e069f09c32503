"""torch.spyre: the device module of the simulated Spyre accelerator.

Mirrors torch.cuda's surface where it makes sense: devices, streams, events, memory
statistics, seeding, plus ``fallback_counts`` to see which ops still run on the CPU.
"""

from __future__ import annotations

import json

import torch

_ops = torch.ops.spyre

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "current_stream",
    "default_generators",
    "device",
    "device_count",
    "empty_cache",
    "fallback_counts",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_snapshot",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "mem_get_info",
    "report",
    "reset_fallback_counts",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]


def _index(device=None) -> int:
    if device is None:
        return -1
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "spyre":
        raise ValueError(f"expected a spyre device, found {device}")
    return -1 if device.index is None else device.index


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _ops.device_count()


def current_device() -> int:
    return _ops.current_device()


def set_device(device) -> None:
    _ops.set_device(_index(device))


class device:
    """Context manager that makes `index` the current spyre device, like torch.cuda.device."""

    def __init__(self, index):
        self.index = _index(index)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)
        return self

    def __exit__(self, *exc):
        set_device(self.previous)
        return False


class _DeviceProperties:
    """What torch.spyre.get_device_properties returns: the simulated chip's figures."""

    def __init__(self, report: dict):
        config, derived = report["config"], report["derived"]
        resolved = config["resolved"]
        self.name = _name_from(config)
        self.config_hash = config["hash"]
        self.total_memory = int(resolved["memory"]["usable_bytes"])
        self.cores = int(resolved["cores"]["count"])
        self.multi_processor_count = self.cores  # (torch.cuda's name for it)
        self.corelets_per_core = int(resolved["cores"]["corelets"])
        self.clock_rate_ghz = float(resolved["clock_ghz"])
        self.scratchpad_bytes_per_core = int(resolved["cores"]["scratchpad"]["bytes"])
        self.scratchpad_usable_bytes_per_core = int(resolved["cores"]["scratchpad"]["usable_bytes"])
        self.dram_peak_bytes_per_s = float(derived["dram_peak_bytes_per_s"])
        self.dram_deliverable_bytes_per_s = float(derived["dram_deliverable_bytes_per_s"])
        self.peak_ops_per_s = {k: float(v) for k, v in derived["peak_ops_per_s"].items()}

    def __repr__(self):
        return (f"_SpyreDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"cores={self.cores}, clock={self.clock_rate_ghz} GHz, "
                f"fp16={self.peak_ops_per_s.get('fp16', 0) / 1e12:.1f} TFLOPS, "
                f"dram={self.dram_deliverable_bytes_per_s / 1e9:.1f} GB/s)")


def _name_from(config: dict) -> str:
    return f"IBM Spyre (simulated: {config['name']}, config {config['hash']})"


def _report_of(device=None) -> dict:
    index = _index(device)
    return json.loads(_ops.device_report(current_device() if index < 0 else index))


def get_device_name(device=None) -> str:
    """The device's name: the simulated chip's config name and hash."""
    return _name_from(_report_of(device)["config"])


def get_device_properties(device=None) -> _DeviceProperties:
    """Cores, memory, scratchpad, clock and peaks of the simulated chip (from its config)."""
    return _DeviceProperties(_report_of(device))


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of device memory, as torch.cuda.mem_get_info: total is the
    usable capacity, free what the driver has not handed out (the caching allocator's
    cached blocks count as used; torch.spyre.empty_cache() returns them)."""
    index = _index(device)
    free, total = _ops.mem_get_info(current_device() if index < 0 else index)
    return int(free), int(total)


def get_device_capability(device=None) -> tuple:
    """(major, minor) of what the device runs: its instruction set version, 0. (CUDA's
    compute capability has no spyre meaning; code that only compares it for equality
    or ordering between spyre devices keeps working.)"""
    index = _index(device)
    return int(_ops.isa_version(current_device() if index < 0 else index)), 0


def memory_snapshot(device=None) -> list:
    """The caching allocator's segments and their blocks, in torch.cuda.memory_snapshot()'s
    form: per segment device, address, total_size, allocated_size, active_size,
    requested_size, stream, segment_type ("small" or "large") and blocks (address, size,
    requested_size, state: "active_allocated", "active_pending_free" or "inactive")."""
    if device is None:
        return [s for i in range(device_count()) for s in json.loads(_ops.memory_snapshot(i))]
    return json.loads(_ops.memory_snapshot(_index(device)))


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Caps what this process's allocator may reserve on the device at `fraction` of its
    usable memory (torch.cuda's semantics: past it, torch.OutOfMemoryError)."""
    if not isinstance(fraction, float) and not isinstance(fraction, int):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _ops.set_memory_fraction(float(fraction), _index(device))


def caching_allocator_alloc(size: int, device=None, stream=None) -> int:
    """`size` bytes from the caching allocator for `stream` (default: the device's current
    stream); returns the device address. Free it with caching_allocator_delete."""
    index = _index(device)
    if isinstance(stream, torch.Stream):
        index, stream_id = stream.device_index, stream.stream_id
    else:
        stream_id = current_stream(device).stream_id if stream is None else int(stream)
    return _ops.caching_allocator_alloc(int(size), index, stream_id)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Returns an address from caching_allocator_alloc to the allocator."""
    _ops.caching_allocator_delete(int(mem_ptr))


def get_amp_supported_dtype() -> list:
    """The dtypes torch.autocast("spyre", dtype=...) accepts (what the arrays compute in)."""
    return [torch.float16, torch.bfloat16]


def synchronize(device=None) -> None:
    """Waits for all work on the device; a device fault raises RuntimeError."""
    _ops.synchronize(_index(device))


class Stream(torch.Stream):
    """A spyre stream (a driver queue). priority < 0 is high priority.

    Like torch.cuda.Stream, it is a context manager: ``with s:`` makes it the current
    stream (and its device the current device) until the block ends."""

    def __new__(cls, device=None, priority: int = 0):
        index = _index(device)
        index = current_device() if index < 0 else index
        return super().__new__(cls, device=torch.device("spyre", index), priority=priority)

    def __enter__(self):
        self._context = StreamContext(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc):
        context, self._context = self._context, None
        return context.__exit__(*exc)


class StreamContext:
    """Makes `stream` the current stream of its device, and that device the current one,
    for a ``with`` block; then restores both (torch.cuda.StreamContext). None: no-op."""

    def __init__(self, stream):
        self.stream = stream
        self._previous_device = -1
        self._previous_stream = None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        self._previous_device = current_device()
        if self.stream.device_index != self._previous_device:
            set_device(self.stream.device_index)
        self._previous_stream = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self._previous_stream)
        if self._previous_device != self.stream.device_index:
            set_device(self._previous_device)
        return False


def stream(s) -> StreamContext:
    """``with torch.spyre.stream(s):`` runs the block on stream `s` (None: unchanged)."""
    return StreamContext(s)


class Event(torch.Event):
    """A spyre event; elapsed_time() reports simulated milliseconds."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device=torch.device("spyre", current_device()), enable_timing=enable_timing)


def current_stream(device=None) -> torch.Stream:
    stream_id, device_index, device_type = _ops.current_stream(_index(device))
    return torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


def memory_stats(device=None) -> dict:
    return dict(_ops.memory_stats(_index(device)))


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    _ops.reset_peak_memory_stats(_index(device))


def memory_summary(device=None) -> str:
    return _ops.memory_summary(_index(device))


def empty_cache() -> None:
    _ops.empty_cache()


def fallback_counts() -> dict:
    """Op name -> number of calls that ran on the CPU through the fallback."""
    return dict(_ops.fallback_counts())


def reset_fallback_counts() -> None:
    _ops.reset_fallback_counts()


def report(device=None) -> dict:
    """The simulated device's statistics (cycles, traffic, launches) as a dict."""
    import json

    return json.loads(_ops.device_report(_index(device)))


# Random numbers. Each device has a default generator: a Philox4x32-10 stream position
# (seed, offset) from which device random ops (rand, randn, uniform_, normal_,
# bernoulli, dropout) draw on the device, independent of the CPU's generator and of the
# number of cores. Its state is 16 bytes: the seed and the offset, little-endian uint64.


def _generator(device=None) -> torch.Generator:
    return _ops.default_generator(_index(device))


class _DefaultGenerators:
    """torch.spyre.default_generators[i]: device i's default torch.Generator."""

    def __getitem__(self, i: int) -> torch.Generator:
        if not 0 <= i < device_count():
            raise IndexError(f"spyre device {i} does not exist ({device_count()} devices)")
        return _generator(i)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator (as torch.cuda.manual_seed)."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every spyre device's default generator (torch.manual_seed calls this)."""
    _ops.manual_seed_all(int(seed))


def seed() -> None:
    """Seeds the current device's default generator with a nondeterministic number."""
    _generator().seed()


def seed_all() -> None:
    """Seeds every device's default generator with one nondeterministic number."""
    manual_seed_all(_generator().seed())


def initial_seed() -> int:
    """The current device's default generator's seed."""
    return _generator().initial_seed()


def get_rng_state(device="spyre") -> torch.Tensor:
    """The default generator's state: a uint8 CPU tensor of 16 bytes (seed, offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="spyre") -> None:
    _generator(device).set_state(new_state.to("cpu", torch.uint8).contiguous())


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _is_in_bad_fork() -> bool:
    return False
