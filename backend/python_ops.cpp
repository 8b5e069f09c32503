// torch.ops.spyre.*: what the Python module torch.spyre (python/spyre_sim) calls.
// Plain operators rather than a pybind11 module: nothing here needs Python headers.
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "spyre/isa/program.h"

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/op_table.h"
#include "aten/pointwise.h"
#include "runtime/caching_allocator.h"
#include "runtime/launch.h"
#include "report/run_report.h"
#include "runtime/driver.h"
#include "runtime/generator.h"
#include "runtime/streams.h"

namespace spyre::backend {
namespace {

c10::DeviceIndex resolve(std::int64_t device) {
  const auto d = device < 0 ? current_device() : static_cast<c10::DeviceIndex>(device);
  check_device_index(d);
  return d;
}

c10::Dict<std::string, std::int64_t> to_dict(const std::map<std::string, std::int64_t>& m) {
  c10::Dict<std::string, std::int64_t> d;
  for (const auto& [k, v] : m) d.insert(k, v);
  return d;
}

void synchronize(std::int64_t device) {
  c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->synchronizeDevice(resolve(device));
}

std::vector<std::int64_t> current_stream_ids(std::int64_t device) {
  const c10::Stream s = current_stream(resolve(device));
  return {s.id(), s.device_index(), static_cast<std::int64_t>(s.device_type())};
}

void manual_seed_all(std::int64_t seed) {
  for (c10::DeviceIndex i = 0; i < device_count_or_zero(); ++i) default_generator(i).get<SpyreGenerator>()->set_current_seed(static_cast<std::uint64_t>(seed));
}

std::string device_report(std::int64_t device) { return device_report_json(driver_device(resolve(device))); }

// A kernel that reads 64 KiB from the tensor's start: past the end of any small
// tensor's memory, a device fault. For tests of error reporting, and for backend
// developers who want to see what a fault looks like.
void inject_fault(const at::Tensor& t) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "spyre: _inject_fault needs a spyre tensor");
  isa::ProgramBuilder b("spyre::_inject_fault", 1);
  isa::DmaLoad load;
  load.dtype = isa::DType::int8;
  load.shape = {64 << 10, 1, 1};
  b.add(0, load).add(0, isa::Wait{.token_mask = 1});
  launch_program(t.device().index(), b.build(), {reinterpret_cast<std::uint64_t>(t.data_ptr())},
                 "spyre::_inject_fault");
}

}  // namespace

TORCH_LIBRARY(spyre, m) {
  m.def("device_count() -> int", [] { return static_cast<std::int64_t>(device_count_or_zero()); });
  m.def("current_device() -> int", [] { return static_cast<std::int64_t>(current_device()); });
  m.def("set_device(int device) -> ()", [](std::int64_t d) { set_current_device(resolve(d)); });
  m.def("synchronize(int device) -> ()", synchronize);
  m.def("current_stream(int device) -> int[]", current_stream_ids);
  m.def("memory_stats(int device) -> Dict(str, int)", [](std::int64_t d) { return to_dict(memory_stats_map(resolve(d))); });
  m.def("memory_summary(int device) -> str", [](std::int64_t d) { return memory_summary(resolve(d)); });
  m.def("reset_peak_memory_stats(int device) -> ()", [](std::int64_t d) { reset_peak_memory_stats(resolve(d)); });
  m.def("empty_cache() -> ()", [] { empty_cache(); });
  m.def("fallback_counts() -> Dict(str, int)", [] { return to_dict(fallback_counts()); });
  m.def("reset_fallback_counts() -> ()", [] { reset_fallback_counts(); });
  m.def("pow_exponents() -> float[]", [] { return pow_device_exponents(); });
  m.def("pow_program(float exponent) -> int[]", [](double e) { return pow_program(e); });
  m.def("fusible_ops() -> str[]", [] { return fusible_ops(); });
  m.def("analytic_ops() -> str[]", [] { return analytic_ops(); });
  m.def("epilogue_activations() -> str[]", [] { return epilogue_activation_rows(); });
  m.def("manual_seed_all(int seed) -> ()", manual_seed_all);
  m.def("memory_snapshot(int device) -> str", [](std::int64_t d) { return memory_snapshot_json(resolve(d)); });
  m.def("set_memory_fraction(float fraction, int device) -> ()",
        [](double f, std::int64_t d) { set_memory_fraction(f, resolve(d)); });
  m.def("caching_allocator_alloc(int size, int device, int stream) -> int", [](std::int64_t size, std::int64_t d, std::int64_t s) {
    TORCH_CHECK(size >= 0, "spyre: caching_allocator_alloc of a negative size (", size, ")");
    return static_cast<std::int64_t>(raw_alloc(static_cast<std::size_t>(size), resolve(d), s));
  });
  m.def("caching_allocator_delete(int address) -> ()", [](std::int64_t a) { raw_delete(static_cast<std::uint64_t>(a)); });
  m.def("isa_version(int device) -> int", [](std::int64_t d) {
    spyre_device_properties_t p{};
    p.struct_size = sizeof p;
    SPYRE_CHECK(spyreDeviceGetProperties(driver_device(resolve(d)), &p));
    return static_cast<std::int64_t>(p.isa_version);
  });
  m.def("default_generator(int device) -> Generator?", [](std::int64_t d) { return std::optional<at::Generator>(default_generator(resolve(d))); });
  m.def("device_report(int device) -> str", device_report);
  m.def("mem_get_info(int device) -> int[]", [](std::int64_t d) {
    std::size_t free_bytes = 0, total_bytes = 0;
    SPYRE_CHECK(spyreMemGetInfo(driver_device(resolve(d)), &free_bytes, &total_bytes));
    return std::vector<std::int64_t>{static_cast<std::int64_t>(free_bytes), static_cast<std::int64_t>(total_bytes)};
  });
  m.def("configure(str config, str yaml, str[] overrides, int devices, str mode) -> ()",
        [](const std::string& config, const std::string& yaml, const std::vector<std::string>& overrides,
           std::int64_t devices, const std::string& mode) { configure_driver(config, yaml, overrides, devices, mode); });
  m.def("driver_api_version() -> int", [] { return static_cast<std::int64_t>(driver_api_version()); });
  m.def("_inject_fault(Tensor t) -> ()", inject_fault);
  m.def("kernel_cache_stats() -> Dict(str, int)", [] {
    const auto s = kernel_cache_stats();
    return to_dict({{"hits", s.hits}, {"misses", s.misses}});
  });
  m.def("reset_kernel_cache_stats() -> ()", [] { reset_kernel_cache_stats(); });
  // What spyre_sim.run uses: clear the device's statistics and launch records, trace
  // a span of work, and build the run report (the same JSON as spyre-sim run --json).
  m.def("reset_device_stats(int device) -> ()", [](std::int64_t d) {
    SPYRE_CHECK(spyreDeviceSynchronize(driver_device(resolve(d))));
    SPYRE_CHECK(spyreDeviceResetStats(driver_device(resolve(d))));
  });
  m.def("trace_start(int device) -> ()", [](std::int64_t d) { SPYRE_CHECK(spyreTraceStart(driver_device(resolve(d)))); });
  m.def("trace_stop(int device, str path) -> ()", [](std::int64_t d, std::string path) {
    SPYRE_CHECK(spyreTraceStop(driver_device(resolve(d)), path.c_str()));
  });
  m.def("run_report(int device, str workload, float flops) -> str", [](std::int64_t d, std::string workload, double flops) {
    return report::make_report(workload, flops, nlohmann::json::parse(device_report(d)), fallback_counts()).dump();
  });
  m.def("run_report_text(str report) -> str",
        [](std::string r) { return report::report_text(nlohmann::json::parse(r)); });
}

}  // namespace spyre::backend
