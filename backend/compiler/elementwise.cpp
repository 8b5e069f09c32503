#include "compiler/elementwise.h"

#include <algorithm>
#include <stdexcept>

#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

isa::Dma row(std::uint8_t token, isa::DType dtype, std::uint16_t arg, std::uint64_t first, std::uint32_t sp,
             std::uint32_t count) {
  isa::Dma d;
  d.token = token;
  d.dtype = dtype;
  d.arg = arg;
  d.offset = first * isa::dtype_size(dtype);
  d.sp_addr = sp;
  d.shape = {count, 1, 1};
  return d;
}

template <class T>
T as(const isa::Dma& d) {
  T t;
  static_cast<isa::Dma&>(t) = d;
  return t;
}

}  // namespace

std::vector<std::uint8_t> compile_binary(isa::BinaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                         const std::string& name) {
  const std::uint64_t size = isa::dtype_size(dtype);
  // Work in whole sticks so DMA never pays for partial ones between cores.
  const std::uint64_t per_stick = std::max<std::uint64_t>(1, target.stick_bytes / size);
  const std::uint64_t sticks = (count + per_stick - 1) / per_stick;
  const std::uint32_t cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, std::max<std::uint64_t>(sticks, 1)));
  const std::uint64_t per_core = (sticks + cores - 1) / cores * per_stick;
  // Six buffers (a, b, out; double buffered), each `tile` elements, stick-aligned.
  const std::uint64_t max_tile = target.scratchpad_bytes / (6 * size) / per_stick * per_stick;
  if (max_tile == 0) {
    throw std::invalid_argument(name + ": " + std::to_string(count) + " " + std::string(isa::to_string(dtype)) +
                                " elements need at least " + std::to_string(6 * per_stick * size) +
                                " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint64_t tile = std::min<std::uint64_t>({max_tile, per_core, 64 * 1024});
  const std::uint32_t buf = static_cast<std::uint32_t>(tile * size);
  const std::uint32_t sp_a[2] = {0, 3 * buf}, sp_b[2] = {buf, 4 * buf}, sp_o[2] = {2 * buf, 5 * buf};

  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const std::uint64_t first = core * per_core;
    if (first >= count) continue;  // an idle stream: END only
    const std::uint64_t mine = std::min(per_core, count - first);
    const std::uint32_t tiles = static_cast<std::uint32_t>((mine + tile - 1) / tile);
    const auto length = [&](std::uint32_t t) {
      return static_cast<std::uint32_t>(std::min<std::uint64_t>(tile, mine - std::uint64_t{t} * tile));
    };
    const auto load = [&](std::uint32_t t) {
      const std::uint8_t k = t % 2;
      b.add(core, as<isa::DmaLoad>(row(k, dtype, 0, first + std::uint64_t{t} * tile, sp_a[k], length(t))));
      b.add(core, as<isa::DmaLoad>(row(k, dtype, 1, first + std::uint64_t{t} * tile, sp_b[k], length(t))));
    };
    load(0);
    for (std::uint32_t t = 0; t < tiles; ++t) {
      const std::uint8_t k = t % 2;
      if (t + 1 < tiles) load(t + 1);
      b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << k)});
      if (t >= 2) b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << (2 + k))});  // out[k] stored
      b.add(core, isa::VBinary{.op = op, .dtype = dtype, .bcast = isa::Broadcast::none, .a = sp_a[k], .b = sp_b[k],
                               .dst = sp_o[k], .rows = 1, .cols = length(t)});
      b.add(core, as<isa::DmaStore>(row(static_cast<std::uint8_t>(2 + k), dtype, 2, first + std::uint64_t{t} * tile,
                                        sp_o[k], length(t))));
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler
