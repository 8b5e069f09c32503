// The Python extension behind torch.distributed's "spyre" backend (pybind11; the only
// part of the project that links libtorch_python, since PyTorch 2.6's Python cannot
// subclass c10d::Backend). spyre_sim.distributed registers `create_backend` with
// torch.distributed.Backend.register_backend.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/chrono.h>

#include <torch/library.h>

#include "distributed/process_group.h"
#include "distributed/transport.h"

// c10d's operators have kernels for PrivateUse1 (they call the process group) but no
// autograd kernel for its autograd key, which PyTorch 2.6 gives only to its own
// devices (a fallthrough from VariableFallbackKernel): without these, a collective on
// a spyre tensor fails with "Could not run 'c10d::allreduce_' ... 'Autogradspyre'".
TORCH_LIBRARY_IMPL(c10d, AutogradPrivateUse1, m) {
  for (const char* op : {"broadcast_", "allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_",
                         "allgather_coalesced_", "allgather_into_tensor_coalesced_", "reduce_scatter_",
                         "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_", "reduce_", "gather_",
                         "scatter_", "alltoall_", "alltoall_base_", "barrier", "monitored_barrier_", "send", "recv_",
                         "recv_any_source_"}) {
    m.impl(op, torch::CppFunction::makeFallthrough());
  }
}

PYBIND11_MODULE(_spyre_c10d, m) {
  m.doc() = "spyre-sim's torch.distributed backend (collectives between processes, one card each)";
  m.def("create_backend", &spyre::distributed::ProcessGroupSpyre::create, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        "A spyre process group backend over `store` (what register_backend's creator returns).");
  m.def("shared_memory_payloads", &spyre::distributed::shared_memory_payloads,
        "Payloads this process has sent to other ranks through shared memory.");
}
