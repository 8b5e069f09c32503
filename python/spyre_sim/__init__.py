"""spyre_sim: a simulated IBM Spyre accelerator that PyTorch treats as a device.

``import spyre_sim`` loads the backend library (libspyre_torch.so), which registers
"spyre" as PyTorch's PrivateUse1 device, and installs ``torch.spyre`` (the device
module: streams, events, memory statistics, ...), ``tensor.spyre()`` and friends.
An installed package is imported automatically by ``import torch`` through its
``torch.backends`` entry point.
"""

import os
import pathlib

# torch is imported inside the functions: `import torch` itself may import this
# package (through the entry point) while torch is still initialising.

__all__ = ["configure", "generate", "library_path", "run", "report_text"]


def library_path() -> pathlib.Path:
    """Where libspyre_torch.so is: beside the package when installed from the wheel
    (spyre_sim/lib), else $SPYRE_BUILD_DIR/lib, else <repo>/build/lib."""
    installed = pathlib.Path(__file__).resolve().parent / "lib"
    build = os.environ.get("SPYRE_BUILD_DIR")
    if (installed / "libspyre_torch.so").exists():
        candidates = [installed]
    elif build:
        candidates = [pathlib.Path(build) / "lib"]
    else:
        candidates = [pathlib.Path(__file__).resolve().parents[2] / "build" / "lib"]
    for directory in candidates:
        path = directory / "libspyre_torch.so"
        if path.exists():
            return path
    raise ImportError(
        "spyre_sim: libspyre_torch.so not found in "
        + ", ".join(str(c) for c in candidates)
        + "; build the project (tools/dev build) or set SPYRE_BUILD_DIR"
    )


def _load() -> None:
    import torch

    if getattr(torch, "spyre", None) is not None:
        return
    torch.ops.load_library(str(library_path()))
    from . import device as _device  # noqa: PLC0415  (needs the library's operators)

    torch._register_device_module("spyre", _device)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    _print_from_host_copies(torch)
    _compile_spyre_graphs_by_default(torch)
    from . import distributed as _distributed  # noqa: PLC0415

    _distributed.register()


def _print_from_host_copies(torch) -> None:
    """Printing a spyre tensor formats a host copy of its values.

    PyTorch's formatter inspects the values with a dozen ops (masked_select, min, max,
    ceil, ...) on the tensor's own device; it copies XLA and lazy tensors to the CPU
    first, but not PrivateUse1 ones, so printing ran those ops through the CPU
    fallback, counted and warned about them. The device suffix is added from the
    original tensor, so the text is unchanged."""
    import torch._tensor_str as tensor_str  # noqa: PLC0415

    original = tensor_str._tensor_str
    if getattr(original, "_spyre_host_copy", False):
        return

    def _tensor_str(self, indent):
        if self.device.type == "spyre":
            with torch.no_grad():
                self = self.cpu()
        return original(self, indent)

    _tensor_str._spyre_host_copy = True
    tensor_str._tensor_str = _tensor_str


def _compile_spyre_graphs_by_default(torch) -> None:
    """``torch.compile(model)`` without a backend compiles graphs of spyre tensors with
    the spyre backend, as it compiles CUDA graphs with Inductor.

    Inductor, torch.compile's default, has no spyre code generator and would fail with
    "Device spyre not supported"; a graph with a spyre tensor among its inputs (its
    parameters are inputs too) goes to ``spyre_sim.dynamo.backend`` instead, and every
    other graph to Inductor as before. Inductor's modes and options do not apply to the
    spyre backend: given, they are ignored with a warning, once."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None or getattr(wrapper.__call__, "_spyre_default", False):
        return
    inductor = wrapper.__call__

    def __call__(self, model_, inputs_):
        if any(isinstance(t, torch.Tensor) and t.device.type == "spyre" for t in inputs_):
            if self.config and not getattr(wrapper, "_spyre_warned", False):
                import warnings  # noqa: PLC0415

                warnings.warn(f"torch.compile: Inductor's mode and options ({', '.join(sorted(self.config))}) do not "
                              "apply to spyre graphs, which the spyre backend compiles", stacklevel=2)
                wrapper._spyre_warned = True
            from .dynamo import backend  # noqa: PLC0415

            return backend(model_, inputs_)
        return inductor(self, model_, inputs_)

    __call__._spyre_default = True
    wrapper.__call__ = __call__


def _autoload() -> None:
    """The ``torch.backends`` entry point: called by ``import torch``."""
    _load()


_load()


def configure(config=None, *, yaml=None, overrides=None, devices=0, mode=None) -> None:
    """Sets what the simulated devices are built from, before their first use.

    config: a chip YAML file (default: SPYRE_SIM_CONFIG, else the built-in chip), or
    yaml: the same as text; overrides: "key.path=value" strings applied in order (the
    value is YAML; default: SPYRE_SIM_SET); devices: how many (default:
    SPYRE_SIM_DEVICES, else 1); mode: "timed" (the default), "functional" (no timing)
    or "no-data" (timed, values not computed: the same cycles, for fast what-if runs).
    The config is checked now; a bad one, or a call after the devices started, raises
    RuntimeError saying why.
    """
    import torch

    if config is None and yaml is None:
        config = os.environ.get("SPYRE_SIM_CONFIG") or None
    if overrides is None:
        overrides = [o for o in os.environ.get("SPYRE_SIM_SET", "").split(";") if o]
    torch.ops.spyre.configure(
        "" if config is None else os.fspath(config),
        "" if yaml is None else str(yaml),
        [str(o) for o in overrides],
        int(devices),
        "" if mode is None else str(mode),
    )


from .profile import generate, report_text, run  # noqa: E402  (after the library is loaded)
