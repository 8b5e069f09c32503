"""``python3 -m spyre_sim.torchrun ...``: torchrun, with the same arguments, for a
PyTorch built without libuv.

PyTorch 2.6's launcher creates its TCP store with libuv, which Debian's torch 2.6 is
built without ("use_libuv was requested but PyTorch was build without libuv support"),
so plain ``torchrun`` stops before starting a worker. Here USE_LIBUV=0 (unless set)
and every store uses PyTorch's classic TCP server (spyre_sim.distributed.honour_use_libuv,
which the workers apply too when they import spyre_sim); on a PyTorch with libuv,
plain ``torchrun`` works as well.
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("USE_LIBUV", "0")
    from .distributed import honour_use_libuv  # noqa: PLC0415

    honour_use_libuv()
    from torch.distributed.run import main as torchrun  # noqa: PLC0415

    sys.argv[0] = "torchrun"
    torchrun()


if __name__ == "__main__":
    main()
