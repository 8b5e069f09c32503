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

__all__ = ["library_path", "run", "report_text"]


def library_path() -> pathlib.Path:
    """Where libspyre_torch.so is: $SPYRE_BUILD_DIR/lib, else <repo>/build/lib."""
    build = os.environ.get("SPYRE_BUILD_DIR")
    if build:
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


def _autoload() -> None:
    """The ``torch.backends`` entry point: called by ``import torch``."""
    _load()


_load()

from .profile import report_text, run  # noqa: E402  (after the library is loaded)
