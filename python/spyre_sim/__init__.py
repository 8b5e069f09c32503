"""spyre_sim: a simulated IBM Spyre accelerator that PyTorch treats as a device.

Importing this package loads the backend library (libspyre_torch.so), which registers
"spyre" as PyTorch's PrivateUse1 device, so ``torch.device("spyre")`` parses.
"""

import os
import pathlib

import torch

__all__ = ["library_path"]


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


torch.ops.load_library(str(library_path()))
