// Compiled and loaded device programs, keyed by op, shapes, dtypes and the device's
// config hash, so a second call with the same shapes reuses the loaded kernel.
// SPYRE_DUMP_KERNELS=1 prints each newly compiled program, disassembled, to stderr.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "compiler/elementwise.h"
#include "runtime/launch.h"
#include "spyre/spyre_drv.h"

namespace spyre::backend {

struct KernelCacheStats {
  std::int64_t hits = 0, misses = 0;
};

// The program for `key` on `device`, compiling and loading it on a miss. A compile
// failure (no tiling fits) is a c10::Error naming the op and the bytes needed.
spyre_program_t cached_program(c10::DeviceIndex device, const std::string& key,
                               const std::function<std::vector<std::uint8_t>()>& compile, const std::string& name);

// As cached_program, but nullptr when no tiling fits the device (compiler::DoesNotFit;
// the caller then runs the op another way, e.g. on the CPU, counted); the refusal is
// remembered per key. Any other compile error is still a c10::Error.
spyre_program_t cached_program_if_fits(c10::DeviceIndex device, const std::string& key,
                                       const std::function<std::vector<std::uint8_t>()>& compile,
                                       const std::string& name);

// What every device op does: the program for `key` (compiled by `compile` for the
// device's target on the first call), launched on the current stream with `args`.
using Compile = std::function<std::vector<std::uint8_t>(const compiler::Target&)>;
// `traffic`: the op's least DRAM traffic, for the roofline (runtime/launch.h).
void run_cached(c10::DeviceIndex device, const std::string& key, const Compile& compile,
                const std::vector<std::uint64_t>& args, const std::string& name, Traffic traffic);
// As run_cached, but false (nothing launched) when no tiling fits the device.
bool run_cached_if_fits(c10::DeviceIndex device, const std::string& key, const Compile& compile,
                        const std::vector<std::uint64_t>& args, const std::string& name, Traffic traffic);

// A tensor's data as a launch argument.
inline std::uint64_t device_address(const at::Tensor& t) { return reinterpret_cast<std::uint64_t>(t.data_ptr()); }

KernelCacheStats kernel_cache_stats();
void reset_kernel_cache_stats();

// The device dtype for a tensor dtype, if the device's vector and DMA units take it
// (int64, float64, uint8 and complex run on the CPU).
inline std::optional<isa::DType> device_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return isa::DType::fp32;
    case c10::kHalf: return isa::DType::fp16;
    case c10::kBFloat16: return isa::DType::bf16;
    case c10::kInt: return isa::DType::int32;
    case c10::kChar: return isa::DType::int8;
    case c10::kBool: return isa::DType::boolean;
    default: return std::nullopt;
  }
}

// The floating dtypes the compute arrays multiply (fp32, fp16, bf16).
inline std::optional<isa::DType> device_float_dtype(c10::ScalarType t) {
  const auto d = device_dtype(t);
  if (d && isa::is_float(*d)) return d;
  return std::nullopt;
}

// kDevicePositions fp32 values 0, 1, 2, ... on `device`, uploaded once and kept for the
// process's life: kernels that need element positions (causal attention's bands, arg
// reductions) read them, as the vector units have no index instruction.
inline constexpr std::int64_t kDevicePositions = 16384;
const at::Tensor& device_positions(c10::Device device);

// The compiler's view of a device (cores, scratchpad) and its config hash.
const compiler::Target& target(c10::DeviceIndex device);
const std::string& config_hash(c10::DeviceIndex device);

}  // namespace spyre::backend
