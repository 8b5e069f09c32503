"""torch.distributed on spyre: the "spyre" process-group backend.

``import spyre_sim`` registers it, so ``torch.distributed.init_process_group("spyre")``
works in each process that ``torchrun`` starts. Each process drives one card (its
``spyre:0``), as the real stack runs one card per process; the collectives move the
cards' bytes between the processes (TCP between every pair of ranks, found through
the process group's store; ``SPYRE_C10D_ADDR`` sets the address a rank listens on,
otherwise 127.0.0.1 when ``MASTER_ADDR`` is local and every interface when not) and
take the modelled time of their algorithm over the links of the system the chip
config's ``system`` section describes, the ranks being its cards 0..N-1 (ring
all-reduce, all-gather and reduce-scatter; tree broadcast and reduce; direct gather,
scatter, all-to-all and send/recv). A collective is a command of the current stream:
it starts when the last rank has reached it and ends that modelled time later, the
same instant on every rank; ``spyre_sim``'s reports count it under ``communication``.
"""

import importlib
import importlib.machinery
import importlib.util

_extension = None


def extension():
    """The compiled backend (``_spyre_c10d``), loaded from beside libspyre_torch.so."""
    global _extension
    if _extension is None:
        from . import library_path  # noqa: PLC0415

        directory = library_path().parent
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = directory / f"_spyre_c10d{suffix}"
            if path.exists():
                spec = importlib.util.spec_from_file_location("_spyre_c10d", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                _extension = module
                break
        else:
            raise ImportError(f"spyre_sim.distributed: _spyre_c10d not found in {directory}; build the project")
    return _extension


def _create_backend(store, rank, size, timeout):
    return extension().create_backend(store, rank, size, timeout)


def honour_use_libuv() -> None:
    """With USE_LIBUV=0, every TCP store PyTorch creates uses its classic server.

    PyTorch 2.6 reads USE_LIBUV for some of its stores but not for the client a
    torchrun worker creates (torch.distributed.rendezvous's agent-store branch), and
    Debian's torch is built without libuv, so there every store must be told. Idempotent.
    """
    import os  # noqa: PLC0415

    if os.environ.get("USE_LIBUV") != "0":
        return
    import torch.distributed as dist  # noqa: PLC0415

    if getattr(dist.TCPStore, "_spyre_without_libuv", False):
        return
    # (By module name: the package attribute `rendezvous` is a function of that name.)
    modules = [importlib.import_module(f"torch.distributed.{name}") for name in
               ("rendezvous", "elastic.rendezvous.c10d_rendezvous_backend", "elastic.rendezvous.static_tcp_rendezvous")]

    class TCPStore(dist.TCPStore):
        _spyre_without_libuv = True

        def __init__(self, *args, **kwargs):
            kwargs["use_libuv"] = False
            super().__init__(*args, **kwargs)

    for module in [dist, *modules]:
        module.TCPStore = TCPStore


def register() -> None:
    """Registers the "spyre" backend with torch.distributed (once; idempotent)."""
    import torch.distributed as dist  # noqa: PLC0415

    if not dist.is_available():
        return
    honour_use_libuv()
    if "spyre" not in dist.Backend.backend_list:
        dist.Backend.register_backend("spyre", _create_backend, devices=["spyre"])
