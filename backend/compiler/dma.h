// DMA descriptors for the compiler's code generators.
#pragma once

#include <array>
#include <cstdint>

#include "spyre/isa/isa.h"

namespace spyre::compiler {

// A DmaLoad or DmaStore of up to three dimensions: `offset` in bytes from the
// argument's address, `shape` and the device `stride` in elements (the scratchpad
// side packed).
template <class T>
T make_dma(std::uint8_t token, isa::DType dtype, std::uint16_t arg, std::uint64_t offset, std::uint32_t sp,
           std::array<std::uint32_t, 3> shape, std::array<std::int64_t, 3> stride) {
  T d;
  d.token = token;
  d.dtype = dtype;
  d.arg = arg;
  d.offset = offset;
  d.sp_addr = sp;
  d.shape = shape;
  d.mem_stride = stride;
  return d;
}

// A Wait for every token named (token t is bit t of the mask): wait_on(kStore + slot),
// wait_on(kW, kRs + slot).
template <class... Tokens>
isa::Wait wait_on(Tokens... tokens) {
  return isa::Wait{.token_mask = static_cast<std::uint16_t>(((1u << static_cast<unsigned>(tokens)) | ...))};
}

}  // namespace spyre::compiler
