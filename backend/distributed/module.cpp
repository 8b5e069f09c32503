// The Python extension behind torch.distributed's "spyre" backend (pybind11; the only
// part of the project that links libtorch_python, since PyTorch 2.6's Python cannot
// subclass c10d::Backend). spyre_sim.distributed registers `create_backend` with
// torch.distributed.Backend.register_backend.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/chrono.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/transport.h"

namespace {

// c10d's operators (and the functional collectives DTensor uses) have kernels for
// PrivateUse1, which call the process group, but none for its autograd key: PyTorch 2.6
// gives a fallthrough there to its own devices only (VariableFallbackKernel), so a
// collective on a spyre tensor failed with "Could not run 'c10d::allreduce_' ...
// 'Autogradspyre'". Each such operator without one gets a fallthrough, as the built-in
// devices' operators effectively have.
void let_collectives_through_autograd() {
  static std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const std::string ns : {"c10d", "_c10d_functional", "_dtensor"}) {
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::AutogradPrivateUse1,
                                                    __FILE__, __LINE__);
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind(ns + "::", 0) != 0) continue;
      const auto op = dispatcher.findOp(name);
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::AutogradPrivateUse1)) continue;
      const std::string qualified = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
      library->impl(qualified.c_str(), torch::CppFunction::makeFallthrough());
    }
    libraries.push_back(std::move(library));
  }
}

}  // namespace

PYBIND11_MODULE(_spyre_c10d, m) {
  m.doc() = "spyre-sim's torch.distributed backend (collectives between processes, one card each)";
  let_collectives_through_autograd();
  m.def("create_backend", &spyre::distributed::ProcessGroupSpyre::create, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        "A spyre process group backend over `store` (what register_backend's creator returns).");
  m.def("shared_memory_payloads", &spyre::distributed::shared_memory_payloads,
        "Payloads this process has sent to other ranks through shared memory.");
}
