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
#include "spyre/spyre_drv.h"

namespace spyre::backend {

struct KernelCacheStats {
  std::int64_t hits = 0, misses = 0;
};

// The program for `key` on `device`, compiling and loading it on a miss. A compile
// failure (no tiling fits) is a c10::Error naming the op and the bytes needed.
spyre_program_t cached_program(c10::DeviceIndex device, const std::string& key,
                               const std::function<std::vector<std::uint8_t>()>& compile, const std::string& name);

KernelCacheStats kernel_cache_stats();
void reset_kernel_cache_stats();

// The device dtype computing kernels for a tensor dtype, if the device kernels take it.
inline std::optional<isa::DType> device_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return isa::DType::fp32;
    case c10::kHalf: return isa::DType::fp16;
    case c10::kBFloat16: return isa::DType::bf16;
    default: return std::nullopt;
  }
}

// Runs an elementwise kernel on contiguous, same-shape, same-dtype `inputs` of one
// device into a new output tensor like inputs[0]: compiled once per op, dtype and
// element count (then cached), launched with the inputs' addresses and the output's.
using ElementwiseCompiler =
    std::function<std::vector<std::uint8_t>(isa::DType, std::uint64_t count, const compiler::Target&)>;
at::Tensor run_elementwise(const char* name, const std::vector<at::Tensor>& inputs, const ElementwiseCompiler& compile);

// The compiler's view of a device (cores, scratchpad) and its config hash.
const compiler::Target& target(c10::DeviceIndex device);
const std::string& config_hash(c10::DeviceIndex device);

}  // namespace spyre::backend
