"""The ``spyre-sim`` command of an installed wheel: runs the bundled binary."""

import os
import pathlib
import sys


def binary() -> pathlib.Path:
    """The spyre-sim executable: the wheel's (spyre_sim/bin), else the build tree's."""
    here = pathlib.Path(__file__).resolve().parent
    build = os.environ.get("SPYRE_BUILD_DIR")
    for candidate in (here / "bin" / "spyre-sim",
                      pathlib.Path(build) / "bin" / "spyre-sim" if build else None,
                      here.parents[1] / "build" / "bin" / "spyre-sim"):
        if candidate is not None and candidate.exists():
            return candidate
    raise SystemExit("spyre-sim: the binary is not installed beside the package nor built (tools/dev build)")


def main() -> None:
    path = binary()
    os.execv(path, [str(path), *sys.argv[1:]])
