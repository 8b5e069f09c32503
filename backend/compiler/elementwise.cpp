#include "compiler/elementwise.h"

#include <algorithm>
#include <functional>
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


// Scratchpad addresses of one tile's buffers (double-buffered: index by tile % 2).
struct Buffers {
  std::uint32_t in[2][2];  // [input][slot]
  std::uint32_t out[2];    // [slot]
};

// The shared plan of every elementwise kernel: split `count` elements over the cores
// in whole sticks, tile each core's share to fit (inputs + 1) x 2 buffers in the
// scratchpad, prefetch the next tile's inputs while computing the current one, store
// each result tile asynchronously. `compute` emits the instruction for one tile.
std::vector<std::uint8_t> compile_tiled(
    std::uint32_t inputs, isa::DType dtype, std::uint64_t count, const Target& target, const std::string& name,
    const std::function<isa::Instruction(const Buffers&, std::uint32_t slot, std::uint32_t length)>& compute) {
  const std::uint64_t size = isa::dtype_size(dtype);
  const std::uint32_t buffers = 2 * (inputs + 1);
  // Work in whole sticks so DMA never pays for partial ones between cores.
  const std::uint64_t per_stick = std::max<std::uint64_t>(1, target.stick_bytes / size);
  const std::uint64_t sticks = (count + per_stick - 1) / per_stick;
  const std::uint32_t cores =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, std::max<std::uint64_t>(sticks, 1)));
  const std::uint64_t per_core = (sticks + cores - 1) / cores * per_stick;
  const std::uint64_t max_tile = target.scratchpad_bytes / (buffers * size) / per_stick * per_stick;
  if (max_tile == 0) {
    throw std::invalid_argument(name + ": " + std::to_string(count) + " " + std::string(isa::to_string(dtype)) +
                                " elements need at least " + std::to_string(buffers * per_stick * size) +
                                " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint64_t tile = std::min<std::uint64_t>({max_tile, per_core, 64 * 1024});
  const std::uint32_t bytes = static_cast<std::uint32_t>(tile * size);
  Buffers buf{};
  for (std::uint32_t slot = 0; slot < 2; ++slot) {
    for (std::uint32_t i = 0; i < inputs; ++i) buf.in[i][slot] = (slot * (inputs + 1) + i) * bytes;
    buf.out[slot] = (slot * (inputs + 1) + inputs) * bytes;
  }
  const std::uint16_t out_arg = static_cast<std::uint16_t>(inputs);

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
      for (std::uint32_t i = 0; i < inputs; ++i) {
        b.add(core, as<isa::DmaLoad>(row(k, dtype, static_cast<std::uint16_t>(i), first + std::uint64_t{t} * tile,
                                         buf.in[i][k], length(t))));
      }
    };
    load(0);
    for (std::uint32_t t = 0; t < tiles; ++t) {
      const std::uint8_t k = t % 2;
      if (t + 1 < tiles) load(t + 1);
      b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << k)});
      if (t >= 2) b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << (2 + k))});  // out[k] stored
      b.add(core, compute(buf, k, length(t)));
      b.add(core, as<isa::DmaStore>(row(static_cast<std::uint8_t>(2 + k), dtype, out_arg,
                                        first + std::uint64_t{t} * tile, buf.out[k], length(t))));
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace

std::vector<std::uint8_t> compile_binary(isa::BinaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                         const std::string& name) {
  return compile_tiled(2, dtype, count, target, name, [&](const Buffers& buf, std::uint32_t k, std::uint32_t length) {
    return isa::Instruction(isa::VBinary{.op = op, .dtype = dtype, .bcast = isa::Broadcast::none, .a = buf.in[0][k],
                                         .b = buf.in[1][k], .dst = buf.out[k], .rows = 1, .cols = length});
  });
}

std::vector<std::uint8_t> compile_unary(isa::UnaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                        const std::string& name) {
  return compile_tiled(1, dtype, count, target, name, [&](const Buffers& buf, std::uint32_t k, std::uint32_t length) {
    return isa::Instruction(
        isa::VUnary{.op = op, .dtype = dtype, .src = buf.in[0][k], .dst = buf.out[k], .count = length});
  });
}

}  // namespace spyre::compiler
